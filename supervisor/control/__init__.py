"""The coordination authority: controller leases and fences, pane leases, receipt-bound
handoffs, the lease inventory, and the durable stores they live in."""

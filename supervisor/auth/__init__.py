"""Who is calling and what they may do: caller identities, scopes, named clients, audit."""

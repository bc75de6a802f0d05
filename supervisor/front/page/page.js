// panewarden status page: every pane's status, and the live screen of the selected one.
// Read-only: nothing here sends anything but GET /feed. The token lives in `token` only.
"use strict";
(function () {
  let token = null;
  let selected = null;
  let paneAbort = null;
  const rows = new Map();
  const $ = (id) => document.getElementById(id);
  const NAMES = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];

  function showError(text) { $("error").textContent = text; }

  // One fetch of /feed, its text/event-stream read through a ReadableStream.
  async function feed(query, onEvent, signal, onOpen) {
    const response = await fetch("/feed" + query, {
      headers: { Authorization: "Bearer " + token },
      cache: "no-store",
      credentials: "omit",
      signal: signal,
    });
    if (!response.ok) {
      let message = response.status + "";
      try { message = (await response.json()).message + " (" + response.status + ")"; } catch (e) {}
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    if (onOpen) onOpen();
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).trim());
        }
        if (data.length) onEvent(name, JSON.parse(data.join("\n")));
      }
    }
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function onStatus(s) {
    let tr = rows.get(s.pane);
    if (s.removed) {
      if (tr) { tr.remove(); rows.delete(s.pane); }
      return;
    }
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.pane = s.pane;
      tr.addEventListener("click", () => select(s.pane));
      rows.set(s.pane, tr);
      $("panes").tBodies[0].appendChild(tr);
    }
    tr.replaceChildren();
    cell(tr, s.pane, "name");
    cell(tr, s.state, "state state-" + s.state);
    cell(tr, s.kind || "-", "kind");
    cell(tr, String(s.turn), "turn");
    cell(tr, String(s.seq), "seq");
    cell(tr, s.lifecycle, "lifecycle");
    cell(tr, s.agent, "agent");
    cell(tr, s.confined ? "yes" : "no", "confined");
    cell(tr, s.lease ? s.lease.lease_type + ":" + s.lease.lease_id : "-", "lease");
    tr.classList.toggle("selected", s.pane === selected);
    if (selected === null) select(s.pane);
  }

  // A 256-colour palette entry: a class for the 16 ANSI colours, else rgb().
  function palette(index, prefix) {
    if (index < 8) return prefix + NAMES[index];
    if (index < 16) return prefix + "b" + NAMES[index - 8];
    if (index >= 232) { const v = 8 + (index - 232) * 10; return "rgb(" + v + "," + v + "," + v + ")"; }
    const c = index - 16, steps = [0, 95, 135, 175, 215, 255];
    return "rgb(" + steps[Math.floor(c / 36)] + "," + steps[Math.floor(c / 6) % 6] + "," + steps[c % 6] + ")";
  }

  // SGR parameters -> the style of the text that follows.
  function applySgr(style, params) {
    const p = params === "" ? [0] : params.split(";").map(Number);
    for (let i = 0; i < p.length; i++) {
      const n = p[i];
      if (n === 0) { style.fg = null; style.bg = null; style.bold = false; style.rev = false; }
      else if (n === 1) style.bold = true;
      else if (n === 7) style.rev = true;
      else if (n >= 30 && n <= 37) style.fg = "fg-" + NAMES[n - 30];
      else if (n >= 90 && n <= 97) style.fg = "fg-b" + NAMES[n - 90];
      else if (n >= 40 && n <= 47) style.bg = "bg-" + NAMES[n - 40];
      else if (n >= 100 && n <= 107) style.bg = "bg-b" + NAMES[n - 100];
      else if (n === 39) style.fg = null;
      else if (n === 49) style.bg = null;
      else if ((n === 38 || n === 48) && p[i + 1] === 2) {
        const rgb = "rgb(" + p[i + 2] + "," + p[i + 3] + "," + p[i + 4] + ")";
        if (n === 38) style.fg = rgb; else style.bg = rgb;
        i += 4;
      } else if ((n === 38 || n === 48) && p[i + 1] === 5) {
        const value = palette(p[i + 2], n === 38 ? "fg-" : "bg-");
        if (n === 38) style.fg = value; else style.bg = value;
        i += 2;
      }
    }
  }

  function span(text, style) {
    const el = document.createElement("span");
    el.textContent = text;
    let fg = style.fg, bg = style.bg;
    if (style.rev) { fg = bg || "fg-black"; bg = style.fg ? style.fg.replace("fg-", "bg-") : "bg-white";
      if (fg.startsWith("bg-")) fg = fg.replace("bg-", "fg-"); }
    for (const [value, prop] of [[fg, "color"], [bg, "background-color"]]) {
      if (!value) continue;
      if (value.startsWith("rgb")) el.style.setProperty(prop, value);
      else el.classList.add(value);
    }
    if (style.bold) el.classList.add("b");
    return el;
  }

  function onScreen(frame) {
    const pre = $("screen");
    const out = [];
    const sgr = /\x1b\[([0-9;]*)m/g;
    frame.lines.forEach((line, index) => {
      const style = { fg: null, bg: null, bold: false, rev: false };
      let at = 0, m;
      sgr.lastIndex = 0;
      while ((m = sgr.exec(line)) !== null) {
        if (m.index > at) out.push(span(line.slice(at, m.index), style));
        applySgr(style, m[1]);
        at = sgr.lastIndex;
      }
      if (at < line.length) out.push(span(line.slice(at), style));
      if (index < frame.lines.length - 1) out.push(document.createTextNode("\n"));
    });
    pre.replaceChildren(...out);
    pre.dataset.frame = String(frame.frame);
  }

  function select(name) {
    if (paneAbort) paneAbort.abort();
    selected = name;
    for (const [pane, tr] of rows) tr.classList.toggle("selected", pane === name);
    $("viewer").hidden = false;
    $("viewing").textContent = name;
    $("screen").replaceChildren();
    paneAbort = new AbortController();
    feed("?pane=" + encodeURIComponent(name), (event, data) => {
      if (event === "screen" && data.pane === selected) onScreen(data);
      else if (event === "status") onStatus(data);
    }, paneAbort.signal).catch((e) => { if (e.name !== "AbortError") showError(e.message); });
  }

  async function connect(event) {
    event.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    showError("");
    $("conn").textContent = "connecting";
    try {
      await feed("", (name, data) => { if (name === "status") onStatus(data); }, undefined, () => {
        $("login").hidden = true;
        $("main").hidden = false;
        $("conn").textContent = "live";
      });
      showError("the service closed the feed");
    } catch (e) {
      token = null;
      $("login").hidden = false;
      showError(e.status === 401 ? "the service refused the token" : "feed failed: " + e.message);
    }
    $("conn").textContent = "not connected";
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login").addEventListener("submit", connect);
  });
})();

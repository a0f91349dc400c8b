// leasewatch: small progressive enhancements. Every page works without this.
//
// The lock page's "local" time link names the server's zone; with JavaScript
// it names the browser's own zone instead.
(function () {
  "use strict";
  function localZoneLinks(root) {
    var zone;
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    } catch (e) {
      return;
    }
    if (!zone) {
      return;
    }
    var links = root.querySelectorAll("a[data-tz-local]");
    for (var i = 0; i < links.length; i++) {
      var u = new URL(links[i].getAttribute("href"), window.location.href);
      u.searchParams.set("tz", zone);
      links[i].setAttribute("href", u.pathname + u.search + u.hash);
    }
  }
  // Tooltips (SVG <title>) show on hover only: for keyboard users, the
  // timeline's focused mark is described in the line below it.
  function describeFocus(ev) {
    var el = ev.target;
    if (!el || !el.closest) {
      return;
    }
    var svg = el.closest("svg.timeline");
    var out = document.getElementById("tl-focus");
    if (!svg || !out) {
      return;
    }
    var title = null;
    for (var i = 0; i < el.children.length; i++) {
      if (el.children[i].tagName.toLowerCase() === "title") {
        title = el.children[i];
        break;
      }
    }
    if (title) {
      out.textContent = title.textContent;
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    localZoneLinks(document);
  });
  document.addEventListener("focusin", describeFocus);
  document.addEventListener("htmx:afterSwap", function (ev) {
    localZoneLinks(ev.target || document);
  });
})();

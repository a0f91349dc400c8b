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
  document.addEventListener("DOMContentLoaded", function () {
    localZoneLinks(document);
  });
  document.addEventListener("htmx:afterSwap", function (ev) {
    localZoneLinks(ev.target || document);
  });
})();

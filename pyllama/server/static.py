"""--path: static files served from a directory, as llama.cpp's server does (server-http.cpp
mounts `--api-prefix + "/"` on the directory with cpp-httplib's set_mount_point).

Like cpp-httplib's file handler, a GET or HEAD whose path names a regular file under the
directory (a directory: its index.html) is answered with that file before any route; every
other request goes on to the routes. The built-in Web UI is then not served (llama.cpp registers
the embedded assets only without --path), and /sw.js answers a self-removing service worker
when the directory has none (server-http.cpp), so a browser drops the built-in UI's worker.
"""
from __future__ import annotations

import mimetypes
import os

from starlette.responses import FileResponse, Response

# server-http.cpp's worker that unregisters itself and reloads its pages
SW_REMOVE_JS = b"""
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil((async () => {
    await self.registration.unregister();
    for (const key of await caches.keys()) await caches.delete(key);
    for (const c of await self.clients.matchAll({ type: 'window' })) c.navigate(c.url);
})()));
"""


def check_dir(path: str) -> str:
    """The directory, or the start fails with llama.cpp's message."""
    if not os.path.isdir(path):
        raise SystemExit(f"static assets path not found: {path}")
    return os.path.realpath(path)


def lookup(root: str, url_path: str) -> str | None:
    """The file under root that a request path names, or None (cpp-httplib refuses paths that
    leave the directory; a directory maps to its index.html)."""
    rel = url_path.lstrip("/")
    if "\0" in rel or any(part == ".." for part in rel.split("/")):
        return None
    full = os.path.realpath(os.path.join(root, rel))
    if full != root and not full.startswith(root + os.sep):
        return None
    if os.path.isdir(full):
        full = os.path.join(full, "index.html")
    return full if os.path.isfile(full) else None


def file_response(path: str, head: bool) -> Response:
    ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype in ("application/javascript", "application/json"):
        ctype += "; charset=utf-8"
    if head:
        return Response(b"", headers={"Content-Length": str(os.path.getsize(path))},
                        media_type=ctype)
    return FileResponse(path, media_type=ctype)


def sw_remove() -> Response:
    return Response(SW_REMOVE_JS, media_type="application/javascript",
                    headers={"Cache-Control": "no-cache"})

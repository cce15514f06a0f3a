"""Who may connect to an engine's inspector: ZMQ CURVE on both sockets, one key per engine.

Why CURVE and not a handshake: the stream is PUB/SUB, where a subscriber never says who it is
and a publisher cannot refuse one; only the transport can keep a stranger off it. CURVE does
that before any message moves, on the request socket and the stream alike, and encrypts both
(off loopback the token and every prompt's token ids would otherwise cross the network in
clear). libzmq runs it on its I/O thread: no cost on the scheduler's GIL.

The credential is the server's public key. A CURVE client must know it to start the handshake
(it never travels on the wire), so whoever cannot learn it cannot connect; no ZAP handler is
needed (any client key pair is accepted once the client proved it knows the server's key).

- `MCINSPECT_TOKEN` set (required off loopback): the key pair derives from the token, on both
  ends; clients give the same token (`--token` or the same variable).
- Loopback without a token (the default): the engine draws a fresh key pair at start and
  writes its public key to a file only its user can read (`key_file`: mode 0600 in a 0700
  directory, `$MCINSPECT_KEY_DIR`, else `$XDG_RUNTIME_DIR/mcinspect`, else
  `~/.cache/mcinspect/keys`). Clients on the same host read it for the port: no flag for the
  common single-user case, and another local user cannot read the file, so cannot connect.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils import z85

from .errors import McinspectError

KEY_DIR_ENV = "MCINSPECT_KEY_DIR"
_PERSON = b"mcinspect-curve1"
"""Domain separation of the token -> key derivation (bumped if it ever changes)."""


class AuthError(McinspectError):
    """A key cannot be set up or read safely."""


@dataclass(frozen=True)
class CurveKeys:
    """An engine's CURVE key pair, z85-encoded (40 bytes each)."""

    public: bytes
    secret: bytes


def curve_available() -> bool:
    """Whether this libzmq was built with CURVE (pyzmq's wheels are)."""
    return bool(zmq.has("curve"))


def keys_from_token(token: str) -> CurveKeys:
    """The key pair both ends derive from a shared token."""
    raw = hashlib.blake2b(token.encode(), digest_size=32, person=_PERSON).digest()
    secret = z85.encode(raw)
    return CurveKeys(zmq.curve_public(secret), secret)


def fresh_keys() -> CurveKeys:
    """A random key pair for one engine (loopback without a token)."""
    return keys_from_token(secrets.token_hex(32))


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def key_dir() -> Path:
    """Where this user's engines leave their public keys."""
    if explicit := os.environ.get(KEY_DIR_ENV):
        return Path(explicit)
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(runtime) / "mcinspect"
    return Path.home() / ".cache" / "mcinspect" / "keys"


def key_file(port: int) -> Path:
    """The file holding the public key of the loopback engine whose request port is `port`."""
    return key_dir() / f"engine-{port}.key"


def write_key_file(port: int, keys: CurveKeys) -> Path:
    """Publish `keys.public` for clients of this user (atomically, mode 0600); raises AuthError
    when the directory is not this user's alone."""
    directory = key_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise AuthError(f"{directory} must be a directory of this user with mode 0700 (it holds engine keys)")
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".key-", delete=False) as tmp:
        tmp.write(keys.public + b"\n")  # NamedTemporaryFile creates it 0600
    path = key_file(port)
    os.replace(tmp.name, path)
    return path


def remove_key_file(port: int, keys: CurveKeys) -> None:
    """Remove the key file if it still holds this engine's key (a newer engine may own the port)."""
    path = key_file(port)
    try:
        if path.read_bytes().strip() == keys.public:
            path.unlink()
    except OSError:
        pass


def server_key_for(host: str, port: int, token: str) -> bytes | None:
    """The public key a client needs for the engine at host:port: from the token, else (loopback)
    from this user's key file; None when neither exists (the engine then runs without CURVE,
    or it is not this user's and will not answer)."""
    if token:
        return keys_from_token(token).public
    if not is_loopback(host):
        return None
    try:
        key = key_file(port).read_bytes().strip()
    except OSError:
        return None
    return key if len(key) == 40 else None


def missing_key_hint(host: str, port: int, token: str) -> str:
    """Why a client may have got no answer, when it had no key to offer."""
    if token or server_key_for(host, port, token) is not None:
        return ""
    if not is_loopback(host):
        return f"; {host} is not loopback: give the engine's token (--token or MCINSPECT_TOKEN)"
    return f"; no key for port {port} in {key_dir()}: an engine of another user needs its MCINSPECT_TOKEN"


def secure_server(socket: zmq.Socket, keys: CurveKeys | None) -> None:
    """Make `socket` (not yet bound) a CURVE server with `keys`; None leaves it open."""
    if keys is None:
        return
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_server = True


def secure_client(socket: zmq.Socket, server_key: bytes | None) -> None:
    """Make `socket` (not yet connected) a CURVE client of the server with `server_key`."""
    if server_key is None:
        return
    public, secret = zmq.curve_keypair()
    socket.curve_serverkey = server_key
    socket.curve_publickey = public
    socket.curve_secretkey = secret

#!/usr/bin/env python3
"""Expose tpm2-abrmd connections on a Unix socket, for fleetd's TPM client tests.

tpm2-abrmd hands a client its connection as a file descriptor in the reply to the D-Bus method
com.intel.tss2.TctiTabrmd.CreateConnection (passed with SCM_RIGHTS); TPM commands and responses then travel on
that descriptor as plain bytes. Node cannot receive descriptors over a Unix socket, so this bridge does the D-Bus
part (stdlib only: SASL EXTERNAL, NEGOTIATE_UNIX_FD, two method calls) and, for every client that connects to
LISTEN_PATH, opens one new abrmd connection and relays bytes both ways. When the client closes, the bridge closes
the abrmd connection, and abrmd flushes what that connection loaded — the /dev/tpmrm0 behaviour under test.

usage: tabrmd-bridge.py BUS_ADDRESS(unix:path=...) BUS_NAME LISTEN_PATH
Prints READY when listening. Test-only; the bus is a private one on loopback.
"""
import os
import select
import socket
import struct
import sys
import threading

PATH, INTERFACE, MEMBER, ERROR_NAME, REPLY_SERIAL, DESTINATION, SENDER, SIGNATURE, UNIX_FDS = range(1, 10)


def pad(buf, n):
    buf.extend(b"\0" * ((-len(buf)) % n))


def marshal_call(serial, path, interface, member, destination):
    fields = bytearray()
    for code, sig, value in ((PATH, b"o", path), (INTERFACE, b"s", interface), (MEMBER, b"s", member), (DESTINATION, b"s", destination)):
        pad(fields, 8)
        fields += bytes([code, 1]) + sig + b"\0"
        pad(fields, 4)
        raw = value.encode()
        fields += struct.pack("<I", len(raw)) + raw + b"\0"
    msg = bytearray(b"l" + bytes([1, 0, 1]) + struct.pack("<III", 0, serial, len(fields)))
    msg += fields
    pad(msg, 8)
    return bytes(msg)


class Bus:
    def __init__(self, address):
        if not address.startswith("unix:path="):
            raise SystemExit("only unix:path= bus addresses are supported")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address[len("unix:path="):])
        self.buf = bytearray()
        self.fds = []
        self.serial = 0
        self.sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
        self.expect_line(b"OK ")
        self.sock.sendall(b"NEGOTIATE_UNIX_FD\r\n")
        self.expect_line(b"AGREE_UNIX_FD")
        self.sock.sendall(b"BEGIN\r\n")
        self.call("/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "org.freedesktop.DBus")

    def expect_line(self, prefix):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise SystemExit("bus closed during authentication")
            self.buf += chunk
        line, _, rest = bytes(self.buf).partition(b"\r\n")
        self.buf = bytearray(rest)
        if not line.startswith(prefix):
            raise SystemExit("bus authentication failed: %r" % line)

    def fill(self, n):
        while len(self.buf) < n:
            data, anc, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
            if not data:
                raise SystemExit("bus closed")
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(payload) - len(payload) % 4
                    self.fds.extend(struct.unpack("<%di" % (usable // 4), payload[:usable]))
            self.buf += data

    def read_message(self):
        self.fill(16)
        if self.buf[0:1] != b"l":
            raise SystemExit("big-endian bus messages are not supported")
        mtype = self.buf[1]
        body_len, _serial, fields_len = struct.unpack_from("<III", self.buf, 4)
        header_len = 16 + fields_len + ((-(16 + fields_len)) % 8)
        self.fill(header_len + body_len)
        fields = {}
        at = 16
        while at < 16 + fields_len:
            at += (-at) % 8
            code = self.buf[at]
            siglen = self.buf[at + 1]
            sig = bytes(self.buf[at + 2 : at + 2 + siglen])
            at += 3 + siglen
            if sig in (b"s", b"o"):
                at += (-at) % 4
                (n,) = struct.unpack_from("<I", self.buf, at)
                fields[code] = bytes(self.buf[at + 4 : at + 4 + n]).decode()
                at += 5 + n
            elif sig == b"g":
                n = self.buf[at]
                fields[code] = bytes(self.buf[at + 1 : at + 1 + n]).decode()
                at += 2 + n
            elif sig == b"u":
                at += (-at) % 4
                (fields[code],) = struct.unpack_from("<I", self.buf, at)
                at += 4
            else:
                raise SystemExit("unexpected header field signature %r" % sig)
        body = bytes(self.buf[header_len : header_len + body_len])
        del self.buf[: header_len + body_len]
        nfds = fields.get(UNIX_FDS, 0)
        fds, self.fds = self.fds[:nfds], self.fds[nfds:]
        return mtype, fields, body, fds

    def call(self, path, interface, member, destination):
        self.serial += 1
        self.sock.sendall(marshal_call(self.serial, path, interface, member, destination))
        while True:
            mtype, fields, body, fds = self.read_message()
            if fields.get(REPLY_SERIAL) != self.serial:
                for fd in fds:
                    os.close(fd)
                continue
            if mtype == 3:
                raise SystemExit("%s failed: %s %r" % (member, fields.get(ERROR_NAME), body))
            return body, fds


def relay(client, tpm):
    try:
        while True:
            readable, _, _ = select.select([client, tpm], [], [])
            for src in readable:
                dst = tpm if src is client else client
                data = src.recv(65536)
                if not data:
                    return
                dst.sendall(data)
    except OSError:
        pass
    finally:
        client.close()
        tpm.close()


def main():
    address, name, listen_path = sys.argv[1:4]
    bus = Bus(address)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen_path)
    server.listen(8)
    print("READY", flush=True)
    while True:
        client, _ = server.accept()
        _body, fds = bus.call("/com/intel/tss2/Tabrmd/Tcti", "com.intel.tss2.TctiTabrmd", "CreateConnection", name)
        if len(fds) != 1:
            raise SystemExit("CreateConnection returned %d descriptors" % len(fds))
        tpm = socket.socket(fileno=fds[0])
        threading.Thread(target=relay, args=(client, tpm), daemon=True).start()


if __name__ == "__main__":
    main()

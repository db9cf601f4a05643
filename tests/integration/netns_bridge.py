"""ssh's ProxyCommand for the fleet tests: run inside a host's network namespace (`ip netns exec`),
it joins stdin/stdout to HOST:PORT there, so ssh reaches that namespace's sshd over the namespace's
own loopback. (Debian's netcat would do; this keeps the test's dependencies to what it installs.)"""

import os
import selectors
import socket
import sys

sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
sock.settimeout(None)
sel = selectors.DefaultSelector()
sel.register(0, selectors.EVENT_READ)
sel.register(sock, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj == 0:
            data = os.read(0, 65536)
            if not data:
                sock.shutdown(socket.SHUT_WR)
                sel.unregister(0)
                continue
            sock.sendall(data)
        else:
            data = sock.recv(65536)
            if not data:
                sys.exit(0)
            os.write(1, data)

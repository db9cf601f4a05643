"""A small allocate/free service for fleet tests: every PERIOD seconds it allocates MB of 64 KiB
blocks (through malloc), holds them half a period and frees them; the first round's every 16th
block stays, so glibc's heap cannot shrink while an allocator that returns freed pages (jemalloc's
background thread) falls back in every cycle. Usage: alloc_free_service.py MB PERIOD"""

import sys
import time

mb, period = float(sys.argv[1]), float(sys.argv[2])
blocks = int(mb * 16)
survivors, start, k = [], time.time(), 0
while True:
    burst = []
    for i in range(blocks):
        b = bytearray(65536)  # > 512 B: straight to malloc
        (survivors if k == 0 and i % 16 == 0 else burst).append(b)
    time.sleep(max(0.0, start + (k + 0.5) * period - time.time()))
    del burst
    time.sleep(max(0.0, start + (k + 1) * period - time.time()))
    k += 1

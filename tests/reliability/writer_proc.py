"""A writer process for the chaos test: numbered ERROR lines with filler, rotating by rename.

Usage: writer_proc.py LOGDIR LINES ROTATE_EVERY [PAUSE per 50 lines]. Rotated files are renamed app.log.<k> (never
deleted), so nothing may be lost. Prints the last seq written when done.
"""

import os
import sys
import time

folder, total, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.01
path = os.path.join(folder, "app.log")
gen = 0
fh = open(path, "ab", buffering=0)  # noqa: SIM115
for seq in range(1, total + 1):
    fh.write(f"ERROR seq={seq} payload\nINFO step {seq} loss=0.1\n".encode())
    if seq % every == 0:
        gen += 1
        os.rename(path, f"{path}.{gen}")
        fh.write(f"INFO after rotate {seq}\n".encode())  # the old fd still gets a line
        fh.close()
        fh = open(path, "ab", buffering=0)  # noqa: SIM115
    if seq % 50 == 0:
        time.sleep(pause)  # a steady rate, not a wait
fh.close()
print(total)

"""Writer process for the rotation storm: numbered ERROR lines into ``runs/<k>/out.log``, with
``logs/current.log`` a symlink switched to each new run, and ``logs/app.log`` renamed to
``app.log.<k>`` (never deleted: nothing may be lost).

Usage: storm_writer.py ROOT LINES EVERY. Prints the number of lines written.
"""

import os
import sys
import time

root, total, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
logs = os.path.join(root, "logs")
run = 0


def switch(k: int):
    folder = os.path.join(root, "runs", str(k))
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, "out.log")
    fh = open(target, "ab", buffering=0)  # noqa: SIM115
    tmp = os.path.join(logs, "current.tmp")
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(logs, "current.log"))
    return fh


out = switch(0)
app_path = os.path.join(logs, "app.log")
app = open(app_path, "ab", buffering=0)  # noqa: SIM115
for seq in range(1, total + 1):
    fh = out if seq % 2 else app
    fh.write(f"ERROR seq={seq} payload\nINFO step {seq}\n".encode())
    if seq % every == 0:
        run += 1
        out.close()
        out = switch(run)
        os.rename(app_path, f"{app_path}.{run}")
        app.close()
        app = open(app_path, "ab", buffering=0)  # noqa: SIM115
    if seq % 50 == 0:
        time.sleep(0.02)
out.close()
app.close()
print(total)

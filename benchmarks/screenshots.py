"""Screenshots of reports in headless Chromium, for docs/ (run by hand, not by ``python -m
benchmarks``):

    python -m benchmarks.screenshots docs/screenshots REPORT_DIR[=NAME] ...

Each report folder's ``index.html`` is opened from disk (reports are self-contained: no
network needed) and its first screen of ``--height`` CSS pixels saved as ``NAME.png``.
Needs ``chromium`` on the PATH (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

WIDTH_PX = 1280
"""A laptop screen: the reports' 1,100 px column plus margins."""


def screenshot(page: Path, out: Path, height_px: int) -> Path:
    """``page`` rendered by headless Chromium into ``out`` (PNG)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium not found: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={WIDTH_PX},{height_px}", f"--screenshot={out}",
                        page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("reports", nargs="+", help="REPORT_DIR or REPORT_DIR=NAME")
    parser.add_argument("--height", type=int, default=2000, help="CSS pixels captured")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in args.reports:
        folder, _, name = spec.partition("=")
        out = screenshot(Path(folder) / "index.html", args.out / f"{name or Path(folder).name}.png",
                         args.height)
        print(f"{out}: {out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()

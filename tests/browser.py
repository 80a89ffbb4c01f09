"""Headless Chromium through selenium, for the browser tests (the HTML viewer, the demo page).

Debian's ``chromium`` and ``chromium-driver`` (``sudo bash .ci/browser_setup.sh``); selenium
is a dev dependency. `browser_missing` says why a test must skip; `start_chrome` starts an
offline, throw-away browser.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from typing import Any

CHROMIUM = os.environ.get("MINITX_CHROMIUM") or shutil.which("chromium")
CHROMEDRIVER = os.environ.get("MINITX_CHROMEDRIVER") or shutil.which("chromedriver")
INSTALL_HINT = (
    "headless chromium + chromedriver not found; install them with "
    "`sudo bash .ci/browser_setup.sh` (apt-get install -y chromium chromium-driver), "
    "or point MINITX_CHROMIUM / MINITX_CHROMEDRIVER at the binaries"
)
CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
]
TIMEOUT_S = 10.0


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None when they can)."""
    if not (CHROMIUM and CHROMEDRIVER):
        return INSTALL_HINT
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]'"
    return None


def start_chrome(user_data_dir: str | None = None) -> Any:
    """A headless Chromium session (selenium ``webdriver.Chrome``) with an empty profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    profile = user_data_dir or tempfile.mkdtemp(prefix="minitx-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(10)
    return driver


def wait_for(driver: Any, script: str, *args: Any, timeout: float = TIMEOUT_S) -> Any:
    """Poll a JavaScript expression (a ``return ...`` script) until it is truthy; its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    message = f"timed out after {timeout}s waiting for: {script}"
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        lambda d: d.execute_script(script, *args), message
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

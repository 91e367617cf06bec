"""Opens Haul's dashboard in headless Chromium on a daemon that already has tasks in several
states, and records what its first paint shows: the moment the page's #app becomes visible
(seen by a MutationObserver installed before the page's own script runs), the header's
counts and live status, whether "No downloads yet." shows, and each card's state, whether
its progress bar is indeterminate (the animated one), and the class of its message.
Printed as JSON for the Swift test to judge.

    first_paint.py LOGIN_URL CHROMIUM CHROMEDRIVER
"""
import json
import sys

import browser

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

login, chromium, chromedriver = sys.argv[1:4]

driver = browser.chrome(chromium, chromedriver)

# Runs before any of the page's scripts: the snapshot is taken in the same task that shows
# #app, before anything else can change the page.
RECORDER = """
new MutationObserver((changes, observer) => {
  const app = document.getElementById("app");
  if (!app || app.hidden || window.firstPaint) return;
  window.firstPaint = {
    counts: document.getElementById("counts").textContent,
    live: document.getElementById("live").textContent,
    emptyShown: !document.getElementById("empty").hidden,
    cards: [...document.querySelectorAll("li.task")].map((card) => ({
      state: card.dataset.state,
      indeterminate: !card.querySelector("progress").hasAttribute("value"),
      error: card.querySelector(".task-error")?.textContent ?? null,
      note: card.querySelector(".task-note")?.textContent ?? null,
    })),
  };
  observer.disconnect();
}).observe(document, { subtree: true, attributes: true, attributeFilter: ["hidden"], childList: true });
"""

try:
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
    driver.get(login)
    WebDriverWait(driver, 60, poll_frequency=0.05).until(
        lambda d: d.execute_script("return window.firstPaint !== undefined"))
    print(json.dumps({"firstPaint": driver.execute_script("return window.firstPaint")}))
except WebDriverException as error:
    print(json.dumps({"error": str(error).splitlines()[0] if str(error) else type(error).__name__}))
    sys.exit(1)
finally:
    driver.quit()

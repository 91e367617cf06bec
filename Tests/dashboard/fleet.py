"""Opens Haul's dashboard in headless Chromium on a daemon in a fleet, reads its Fleet panel
(each node's row: its cells and state), clicks the Drain button of this daemon's node, and
records the message the page shows. Printed as JSON for the Swift test to judge.

    fleet.py LOGIN_URL CHROMIUM CHROMEDRIVER
"""
import json
import sys

import browser

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

login, chromium, chromedriver = sys.argv[1:4]

driver = browser.chrome(chromium, chromedriver)

ROWS = """
return [...document.querySelectorAll("#fleet-nodes tr")].map((row) => ({
  node: row.dataset.node, state: row.dataset.state,
  cells: [...row.querySelectorAll("td")].map((cell) => cell.textContent),
  drain: !!row.querySelector("button.drain"),
}));
"""

try:
    driver.get(login)
    wait = WebDriverWait(driver, 60, poll_frequency=0.05)
    wait.until(lambda d: d.execute_script(
        "return !document.getElementById('fleet').hidden && document.querySelectorAll('#fleet-nodes tr').length > 0"))
    seen = {
        "rows": driver.execute_script(ROWS),
        "caps": driver.execute_script("return document.getElementById('fleet-caps').textContent"),
        "limitsTitle": driver.execute_script("return document.getElementById('limits-title').textContent"),
    }
    # Found and clicked in one step of the page: the table redraws every second.
    driver.execute_script("document.querySelector('#fleet-nodes tr button.drain').click()")
    wait.until(lambda d: d.execute_script(
        "const m = document.getElementById('message'); return !m.hidden && m.textContent.length > 0"))
    seen["message"] = driver.execute_script("return document.getElementById('message').textContent")
    print(json.dumps(seen))
except WebDriverException as error:
    print(json.dumps({"error": str(error).splitlines()[0] if str(error) else type(error).__name__}))
    sys.exit(1)
finally:
    driver.quit()

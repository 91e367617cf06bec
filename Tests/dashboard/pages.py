"""Opens Haul's dashboard in headless Chromium on a daemon with more downloads than one page,
and records what each page shows: how many cards, whether "Show more" is offered and its
note; then clicks "Show more" until it goes, recording each step. Printed as JSON for the
Swift test to judge, with the page's console errors.

    pages.py LOGIN_URL CHROMIUM CHROMEDRIVER
"""
import json
import sys

import browser

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

login, chromium, chromedriver = sys.argv[1:4]

driver = browser.chrome(chromium, chromedriver)


def seen():
    return driver.execute_script("""
        return {
          cards: document.querySelectorAll("li.task").length,
          more: !document.getElementById("more-tasks").hidden,
          note: document.getElementById("more-note").hidden ? null : document.getElementById("more-note").textContent,
        };""")


try:
    driver.get(login)
    WebDriverWait(driver, 60, poll_frequency=0.05).until(
        lambda d: d.execute_script("return !document.getElementById('app').hidden"))
    steps = [seen()]
    while steps[-1]["more"] and len(steps) < 10:
        before = steps[-1]["cards"]
        driver.find_element(By.ID, "more-tasks").click()
        WebDriverWait(driver, 60, poll_frequency=0.05).until(
            lambda d: seen()["cards"] > before or not seen()["more"])
        steps.append(seen())
    errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    print(json.dumps({"steps": steps, "errors": errors}))
except WebDriverException as error:
    print(json.dumps({"error": str(error).splitlines()[0] if str(error) else type(error).__name__}))
    sys.exit(1)
finally:
    driver.quit()

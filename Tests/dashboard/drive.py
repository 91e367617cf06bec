"""Drives Haul's dashboard in headless Chromium through Selenium, as a person would: log in
with the link from `haul ui`, add a download, watch its progress bar move, pause it, resume
it, see it reach 100 %, add another with the keyboard only, change the global limits,
remove all.
Screenshots go to ARTIFACTS; what was seen is printed as JSON for the Swift test to judge.

    drive.py LOGIN_URL SLOW_URL SMALL_URL DIRECTORY ARTIFACTS CHROMIUM CHROMEDRIVER
"""
import json
import sys

import browser
import time

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

login, slow_url, small_url, directory, artifacts, chromium, chromedriver = sys.argv[1:8]

driver = browser.chrome(chromium, chromedriver)
wait = WebDriverWait(driver, 120, poll_frequency=0.05)
seen = {"percents": [], "states": [], "steps": []}


def tasks():
    """[(state, percent, name)] of every task on the page, read in one go (the list redraws)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('li.task')].map(t => [t.dataset.state,"
        " Number(t.querySelector('progress').dataset.percent), t.querySelector('.task-name').textContent])")


def first():
    current = tasks()
    if current:
        state, percent, _ = current[0]
        if not seen["states"] or seen["states"][-1] != state:
            seen["states"].append(state)
        if not seen["percents"] or seen["percents"][-1] != percent:
            seen["percents"].append(percent)
        return state, percent
    return None, None


def click(selector):
    """Clicks what `selector` finds, found and clicked in one step of the page: the list redraws
    on every progress event, so an element found by one WebDriver call may be gone by the next
    (a loaded CI run once saw fifty tries in a row find it stale)."""
    wait.until(lambda d: d.execute_script(
        "const target = document.querySelector(arguments[0]);"
        " if (!target) return false; target.click(); return true;", selector))


def active_id():
    """The id of the focused element (the list may redraw it away under Selenium's reference:
    the page puts the focus back on the new one, so ask again)."""
    for _ in range(50):
        try:
            return driver.switch_to.active_element.get_attribute("id")
        except StaleElementReferenceException:
            time.sleep(0.02)
    raise RuntimeError("the focused element kept going stale")


def press(keys):
    """Types keys as the keyboard does: to whatever has the focus. (Sent to the focused
    element through WebDriver's element calls instead, a key is refused when WebDriver finds
    that element not interactable — a button the task list just redrew out of view, under a
    loaded machine — though a keyboard would still deliver it.)"""
    ActionChains(driver).send_keys(keys).perform()


def shot(name):
    driver.save_screenshot(f"{artifacts}/{name}.png")
    seen["steps"].append(name)


try:
    driver.get(login)
    wait.until(lambda d: d.find_element(By.ID, "app").is_displayed())
    seen["landed"] = driver.current_url
    # The login leaves no cookie a server on another port of this host would receive, and
    # the code is gone from the address bar.
    seen["cookies"] = [cookie["name"] for cookie in driver.get_cookies()]
    seen["sessionKept"] = driver.execute_script("return sessionStorage.getItem('haul.session') !== null")
    seen["prefilledDirectory"] = driver.find_element(By.ID, "add-directory").get_attribute("value")
    wait.until(lambda d: "on" in d.find_element(By.ID, "live").get_attribute("class"))

    # Add the slow download from the form.
    driver.find_element(By.ID, "add-urls").send_keys(slow_url)
    field = driver.find_element(By.ID, "add-directory")
    field.clear()
    field.send_keys(directory)
    # One connection: the server's limit per connection then holds the whole download to
    # 512 KiB/s, seconds to watch, pause and resume (several would finish it in a moment).
    driver.find_element(By.ID, "add-connections").send_keys("1")
    driver.find_element(By.ID, "add-submit").click()

    # The bar moves: a value between 0 and 100, then a larger one.
    wait.until(lambda d: (lambda s: s[0] == "running" and 0 < s[1] < 100)(first()))
    moving_from = seen["percents"][-1]
    wait.until(lambda d: (lambda s: s[1] is not None and s[1] > moving_from)(first()))
    shot("progress")

    click("li.task button[data-operation=pause]")
    wait.until(lambda d: first()[0] == "paused")
    seen["pausedAt"] = first()[1]
    shot("paused")

    click("li.task button[data-operation=resume]")
    wait.until(lambda d: first() == ("completed", 100))
    shot("completed")

    # Keyboard only: Tab to the URL box, type, Tab to Add, Enter.
    driver.find_element(By.TAG_NAME, "body").click()
    for _ in range(80):
        if active_id() == "add-urls":
            break
        press(Keys.TAB)
    seen["keyboardReachedURLs"] = active_id() == "add-urls"
    press(small_url)
    for _ in range(20):
        if active_id() == "add-submit":
            break
        press(Keys.TAB)
    seen["keyboardReachedAdd"] = active_id() == "add-submit"
    press(Keys.ENTER)
    wait.until(lambda d: len(tasks()) == 2 and all(t[0] == "completed" for t in tasks()))
    seen["tasks"] = tasks()

    # The global limits, live.
    for field_id, value in [("limit-concurrent", "2"), ("limit-rate", "512")]:
        field = driver.find_element(By.ID, field_id)
        field.clear()
        field.send_keys(value)
    driver.find_element(By.ID, "limits-apply").click()
    wait.until(lambda d: d.find_element(By.ID, "message").text == "Limits applied.")
    seen["limitsShown"] = [driver.find_element(By.ID, i).get_attribute("value") for i in ["limit-concurrent", "limit-rate"]]
    # The speed graph sampled the download: its peak is above nothing.
    seen["graphPeak"] = driver.find_element(By.ID, "graph-peak").text
    shot("dashboard")

    driver.set_window_size(390, 844)
    wait.until(lambda d: d.execute_script("return window.innerWidth") <= 400)
    seen["phoneOverflow"] = driver.execute_script(
        "return document.documentElement.scrollWidth > window.innerWidth")
    shot("phone")

    # Remove all, after the page's confirmation: the list empties, the files stay.
    remove_all = driver.find_element(By.ID, "remove-all")  # not in the list: it does not redraw
    # Where a person would have it: in the middle of the screen, not under the sticky bar
    # (the resize to a phone's width leaves the page scrolled wherever the layout put it).
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", remove_all)
    remove_all.click()
    WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: len(tasks()) == 0 and d.find_element(By.ID, "empty").is_displayed())
    seen["afterRemoveAll"] = len(tasks())

    seen["console"] = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    print(json.dumps(seen))
except (WebDriverException, RuntimeError) as error:
    seen["error"] = str(error).splitlines()[0] if str(error) else type(error).__name__
    seen["page"] = tasks() if driver else None
    try:
        shot("failure")
        seen["console"] = driver.get_log("browser")
    except WebDriverException:
        pass
    print(json.dumps(seen))
    sys.exit(1)
finally:
    driver.quit()

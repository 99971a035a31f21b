"""The llada-server page in a real browser (Debian's chromium + chromium-driver, python3-selenium;
scripts/install-deps.sh --web): submit a prompt, wait for the canvas to fill, check that the
final text equals the API's answer for the same seed, step the replay control back, and save a
screenshot. Exits 77 (ctest: skipped) with a message when no browser is installed.

    /usr/bin/python3 tests/web/page_test.py BIN_DIR MODEL SCREENSHOT
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request


def main():
    bin_dir, model, shot = sys.argv[1:4]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        print("skipped: python3-selenium is not installed (scripts/install-deps.sh --web)")
        return 77
    driver_path = shutil.which("chromedriver")
    if not driver_path or not shutil.which("chromium"):
        print("skipped: chromium / chromedriver are not installed (scripts/install-deps.sh --web)")
        return 77
    srv = subprocess.Popen([os.path.join(bin_dir, "llada-server"), "-m", model, "--port", "0",
                            "-t", "1", "--max-gen", "32", "--block", "8"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(srv.stdout.readline().split()[1])
        base = f"http://127.0.0.1:{port}"
        prompt = "sort 65 56 63 72 59 58:"
        req = urllib.request.Request(base + "/v1/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"prompt": prompt, "max_tokens": 32, "seed": 3,
                                                      "policy": "dual-cache", "threshold": 0.9}).encode())
        want = json.loads(urllib.request.urlopen(req).read())["choices"][0]["text"]
        opts = webdriver.ChromeOptions()
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900"):
            opts.add_argument(a)
        d = webdriver.Chrome(service=Service(driver_path), options=opts)
        try:
            d.get(base + "/")
            box = d.find_element(By.ID, "prompt")
            box.clear()
            box.send_keys(prompt)
            seed = d.find_element(By.ID, "seed")
            seed.clear()
            seed.send_keys("3")
            d.find_element(By.ID, "go").click()
            # The page's own generation: up to the test's time limit (ctest's 120 s, less
            # the browser's start), not a guess at how fast this host decodes.
            WebDriverWait(d, 90).until(lambda x: x.execute_script("return document.body.dataset.done") == "1")
            got = d.find_element(By.ID, "text").text
            stats = d.find_element(By.ID, "stats").text
            cells = d.find_elements(By.CSS_SELECTOR, "#canvas span")
            stable = d.find_elements(By.CSS_SELECTOR, "#canvas span.stable")
            steps = int(d.find_element(By.ID, "scrub").get_attribute("max")) + 1
            d.find_element(By.ID, "prev").click()
            replayed = d.find_element(By.ID, "stepno").text
            d.save_screenshot(shot)
            # A request the server refuses shows its error, not a blank result.
            mt = d.find_element(By.ID, "max_tokens")
            mt.clear()
            mt.send_keys("9999")
            d.execute_script("delete document.body.dataset.done")
            d.find_element(By.ID, "go").click()
            WebDriverWait(d, 90).until(lambda x: x.execute_script("return document.body.dataset.done") == "1")
            refused = d.find_element(By.ID, "stats").text
        finally:
            d.quit()
        ok = True
        if got.strip() != want.strip():
            print(f"FAIL: the page shows {got!r}, the API answered {want!r}")
            ok = False
        if len(cells) != 32 or len(stable) != 32:
            print(f"FAIL: the final canvas has {len(cells)} cells, {len(stable)} stable (want 32, 32)")
            ok = False
        if "NFE" not in stats or "drafts accepted" not in stats or "revisions" not in stats:
            print(f"FAIL: the stats panel reads {stats!r}")
            ok = False
        if "error 400" not in refused or "max_tokens" not in refused:
            print(f"FAIL: a refused request shows {refused!r}, not its error")
            ok = False
        if steps < 2 or replayed != f"step {steps - 1} / {steps}":
            print(f"FAIL: replay: {steps} steps recorded, after one step back it shows {replayed!r}")
            ok = False
        print(("ok" if ok else "failed") + f": {steps} steps, text {got!r}, screenshot {shot}")
        return 0 if ok else 1
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    sys.exit(main())

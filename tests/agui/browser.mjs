// The page of `terminus serve` in a real browser: Debian's headless chromium, driven by
// playwright-core (which downloads no browser). Opens the page, gives the key, picks the agent,
// gives the task, waits for the held call, screenshots it, clicks Approve, waits for the stop
// and screenshots the end. Prints one JSON line: what a test asserts on
// (adapters/cli/tests/serve.rs).
//
//   node browser.mjs URL KEY TASK SCREENSHOT_DIR
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, key, task, shots] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), "terminus-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
  viewport: { width: 1100, height: 900 },
});
const problems = [];
const outside = [];
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (e) => problems.push(String(e)));
  // The first listing, before the key is given, is refused with 401 (the browser logs it).
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().includes("status of 401")) problems.push(m.text());
  });
  page.on("request", (r) => {
    if (!r.url().startsWith(url)) outside.push(r.url());
  });
  await page.goto(url);
  // The server wants a key: the page asks for it.
  await page.locator("#key-row").waitFor({ state: "visible" });
  await page.locator("#key").fill(key);
  await page.locator("#key").dispatchEvent("change");
  await page.locator("#agent option").first().waitFor({ state: "attached" });
  const agents = await page.locator("#agent option").allTextContents();
  await page.locator("#task").fill(task);
  await page.locator("#run").click();

  const approve = page.locator(".held-call button", { hasText: "Approve" });
  await approve.waitFor({ state: "visible", timeout: 60_000 });
  const held = {
    status: await page.locator("#status").textContent(),
    message: await page.locator(".held-call").first().textContent(),
    budgets: await page.locator(".budget span").allTextContents(),
  };
  await page.screenshot({ path: join(shots, "held.png"), fullPage: true });
  await approve.click();

  await page.locator('#end[data-outcome="complete"]').waitFor({ state: "visible", timeout: 60_000 });
  await page.waitForFunction(() => document.getElementById("inspect").textContent.length > 0);
  await page.screenshot({ path: join(shots, "end.png"), fullPage: true });
  const end = {
    status: await page.locator("#status").textContent(),
    reason: await page.locator("#reason").textContent(),
    result: await page.locator("#result").textContent(),
    inspect: await page.locator("#inspect").textContent(),
    thread: (await page.locator("#thread").textContent()).replace(/^thread /, ""),
    steps: await page.locator("#steps > li .rule").allTextContents(),
    calls: await page.locator("#steps .call[data-id]").count(),
    texts: await page.locator("#steps .text").allTextContents(),
    budgets: await page.locator(".budget span").allTextContents(),
  };
  console.log(JSON.stringify({ agents, held, end, problems, outside }));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

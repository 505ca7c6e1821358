// The check lines every client script prints ("ok NAME" / "FAIL NAME: detail" / "note TEXT") and
// its closing "N passed, M failed" (what `cargo xtask clients` reads). Shared by clients.mjs and
// modern_clients.mjs, the way python/checks.py is by the Python scripts.

let passed = 0;
let failed = 0;

export function check(name, ok, detail) {
  if (ok) {
    passed += 1;
    console.log(`ok   ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL ${name}${detail ? `: ${detail}` : ''}`);
  }
}

export const note = (text) => console.log(`note ${text}`);

// Prints the closing counts and exits: non-zero when any check failed.
export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

#!/usr/bin/env bash
# tree-stats.sh: the shape of the package tree, from go list alone: how many
# packages sit under pkg/ and internal/, how many of the module's own
# packages each imports, and how much of the code the largest package holds
# (non-test Go lines). Run it before and after a regrouping to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
go list -f '{{.ImportPath}}|{{join .Imports " "}}|{{join .GoFiles " "}}|{{.Dir}}' ./pkg/... ./internal/... ./cmd/... |
  awk -F'|' -v mod="$mod/" '
  {
    path = $1; sub(mod, "", path)
    n = split($2, imps, " "); own = 0
    for (i = 1; i <= n; i++) if (index(imps[i], mod) == 1) own++
    lines = 0; m = split($3, files, " ")
    for (i = 1; i <= m; i++) {
      f = $4 "/" files[i]
      while ((getline l < f) > 0) lines++
      close(f)
    }
    top = path; sub(/\/.*/, "", top)
    count[top]++; total += lines; pkgs++; imports += own
    if (own > maxown) { maxown = own; maxownpkg = path }
    if (lines > maxlines) { maxlines = lines; maxpkg = path }
    split(path, seg, "/")
    if (top != "cmd" && !((top "/" seg[2]) in folder)) { folder[top "/" seg[2]] = 1; first[top]++ }
  }
  END {
    printf "packages: %d (cmd %d, pkg %d, internal %d)\n", pkgs, count["cmd"], count["pkg"], count["internal"]
    printf "folders directly under pkg/: %d, under internal/: %d\n", first["pkg"], first["internal"]
    printf "own imports per package: mean %.1f, most %d (%s)\n", imports / pkgs, maxown, maxownpkg
    printf "largest package: %s, %d of %d non-test lines (%.1f%%)\n", maxpkg, maxlines, total, 100 * maxlines / total
  }'

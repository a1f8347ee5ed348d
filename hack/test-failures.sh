#!/usr/bin/env bash
# Prints, for each failed test in `go test -v` logs, the failure line and
# the test-file messages logged just before it (where t.Fatalf and
# t.Errorf write), so that the end of a CI log names what failed even when
# the failing package's output scrolled out of the tail above.
#
#   hack/test-failures.sh _output/phase-e2e.log
set -uo pipefail
awk '
  /^[ \t]+[A-Za-z0-9_.-]+\.go:[0-9]+: / { ring[n % 6] = $0; n++; next }
  /^--- PASS: / { n = 0; next }
  /^[ \t]*--- FAIL: / {
    for (i = (n > 6 ? n - 6 : 0); i < n; i++) {
      line = substr(ring[i % 6], 1, 400)
      if (!(line in seen)) { print "  " line; seen[line] = 1 }
    }
    print $0
    found = 1
  }
  /^FAIL[ \t]/ { print $0; found = 1 }
  END { if (!found) print "  (no failed test named in the log: a build error, a panic or a timeout; see the log)" }
' "$@" | tail -40

// Package loggingtest checks that a binary's log lines share one format,
// for the tests of each binary's logging setup.
package loggingtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// CheckLines fails t unless out holds exactly the messages want, in
// order, one line each, every one in format (text: slog's key=value with
// time, level and msg; json: one object a line with those keys).
func CheckLines(t testing.TB, format, out string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (%q):\n%s", len(lines), len(want), want, out)
	}
	for i, line := range lines {
		var msg string
		switch format {
		case "json":
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("line %d is not a JSON object: %v: %s", i, err, line)
				continue
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := m[k]; !ok {
					t.Errorf("line %d has no %q: %s", i, k, line)
				}
			}
			msg, _ = m["msg"].(string)
		case "text":
			if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") {
				t.Errorf("line %d is not slog's text: %s", i, line)
			}
			_, rest, _ := strings.Cut(line, " msg=")
			if strings.HasPrefix(rest, `"`) {
				rest = strings.TrimPrefix(rest, `"`)
				msg, _, _ = strings.Cut(rest, `"`)
			} else {
				msg, _, _ = strings.Cut(rest, " ")
			}
		default:
			t.Fatalf("unknown format %q", format)
		}
		if msg != want[i] {
			t.Errorf("line %d: msg %q, want %q: %s", i, msg, want[i], line)
		}
	}
}

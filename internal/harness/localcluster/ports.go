package localcluster

import (
	"bufio"
	"bytes"
	"strings"
)

// lastLine returns the last non-empty line of out, for error messages.
func lastLine(out []byte) string {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			last = s
		}
	}
	return last
}

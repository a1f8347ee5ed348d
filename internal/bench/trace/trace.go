// Package trace reads recorded LLM inference traffic: when each request
// arrived and how many tokens it carried in and out. The format is the
// Azure LLM inference trace's CSV (TIMESTAMP, ContextTokens,
// GeneratedTokens), which other public traces also use.
package trace

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Request is one recorded request.
type Request struct {
	// At is the arrival time, as an offset from the trace's first request.
	At              time.Duration
	ContextTokens   int
	GeneratedTokens int
}

// Trace is a recorded stream of requests in arrival order.
type Trace struct {
	// Start is the first request's wall-clock arrival.
	Start    time.Time
	Requests []Request
}

// Column names, matched without regard to case.
const (
	colTimestamp = "timestamp"
	colContext   = "contexttokens"
	colGenerated = "generatedtokens"
)

// timestampLayouts are tried in order. The Azure trace writes seven
// fractional digits and no zone; such times are taken as UTC.
var timestampLayouts = []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano}

// ReadFile reads a trace from a CSV file.
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	t, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return t, nil
}

// Read reads a trace from CSV with a header row naming the TIMESTAMP,
// ContextTokens and GeneratedTokens columns, in any order, beside any
// others. Rows need not be sorted; the trace is. Every bad row is an error
// naming its line: a replay of a silently shortened trace would mislead.
func Read(r io.Reader) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("empty trace: no header row")
	}
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	cols, err := columns(header)
	if err != nil {
		return nil, err
	}
	type row struct {
		at       time.Time
		ctx, gen int
	}
	var rows []row
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		at, err := parseTimestamp(rec[cols[0]])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		ctx, err := tokens(rec[cols[1]], "ContextTokens", 1)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		gen, err := tokens(rec[cols[2]], "GeneratedTokens", 1)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		rows = append(rows, row{at, ctx, gen})
	}
	if len(rows) == 0 {
		return nil, errors.New("trace has a header but no requests")
	}
	slices.SortStableFunc(rows, func(a, b row) int { return a.at.Compare(b.at) })
	t := &Trace{Start: rows[0].at, Requests: make([]Request, len(rows))}
	for i, r := range rows {
		t.Requests[i] = Request{At: r.at.Sub(t.Start), ContextTokens: r.ctx, GeneratedTokens: r.gen}
	}
	return t, nil
}

// columns finds the indexes of the timestamp, context and generated
// columns.
func columns(header []string) ([3]int, error) {
	idx := [3]int{-1, -1, -1}
	for i, name := range header {
		switch strings.ToLower(strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))) {
		case colTimestamp:
			idx[0] = i
		case colContext:
			idx[1] = i
		case colGenerated:
			idx[2] = i
		}
	}
	var missing []string
	for i, name := range []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"} {
		if idx[i] < 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return idx, fmt.Errorf("header %q lacks column(s) %s", header, strings.Join(missing, ", "))
	}
	return idx, nil
}

func parseTimestamp(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range timestampLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q is neither %q nor RFC 3339", s, timestampLayouts[0])
}

func tokens(s, column string, least int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a whole number", column, s)
	}
	if n < least {
		return 0, fmt.Errorf("%s is %d, want at least %d", column, n, least)
	}
	return n, nil
}

// Duration is the time from the first arrival to the last.
func (t *Trace) Duration() time.Duration {
	return t.Requests[len(t.Requests)-1].At
}

// Slice returns the requests arriving in [start, start+d), with their At
// made relative to start. The result shares nothing with t.
func (t *Trace) Slice(start, d time.Duration) []Request {
	lo, _ := slices.BinarySearchFunc(t.Requests, start, func(r Request, at time.Duration) int { return cmp.Compare(r.At, at) })
	hi, _ := slices.BinarySearchFunc(t.Requests, start+d, func(r Request, at time.Duration) int { return cmp.Compare(r.At, at) })
	out := make([]Request, hi-lo)
	for i, r := range t.Requests[lo:hi] {
		r.At -= start
		out[i] = r
	}
	return out
}

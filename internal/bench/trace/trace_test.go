package trace

import (
	"strings"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, csv string
		want      []Request
		wantErr   string
	}{{
		name: "azure format",
		csv: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
			"2023-11-16 18:15:46.6805900,374,44\n" +
			"2023-11-16 18:15:50.9951690,396,109\n",
		want: []Request{{0, 374, 44}, {4314579000, 396, 109}},
	}, {
		name: "columns in another order, extra column, unsorted rows, BOM",
		csv: "\ufeffGeneratedTokens,id,TIMESTAMP,ContextTokens\n" +
			"7,b,2024-01-01T00:00:02Z,20\n" +
			"5,a,2024-01-01T00:00:00Z,10\n",
		want: []Request{{0, 10, 5}, {2 * time.Second, 20, 7}},
	}, {
		name:    "missing column",
		csv:     "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,1\n",
		wantErr: "lacks column(s) GeneratedTokens",
	}, {
		name:    "bad timestamp names its line",
		csv:     "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nyesterday,1,1\n",
		wantErr: `line 3: timestamp "yesterday"`,
	}, {
		name:    "zero generated tokens",
		csv:     "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,0\n",
		wantErr: "line 2: GeneratedTokens is 0, want at least 1",
	}, {
		name:    "not a number",
		csv:     "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,ten,1\n",
		wantErr: `line 2: ContextTokens "ten" is not a whole number`,
	}, {
		name:    "short row",
		csv:     "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10\n",
		wantErr: "line 2:",
	}, {
		name:    "header only",
		csv:     "TIMESTAMP,ContextTokens,GeneratedTokens\n",
		wantErr: "no requests",
	}, {
		name:    "empty",
		csv:     "",
		wantErr: "no header row",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tc.csv))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Requests) != len(tc.want) {
				t.Fatalf("requests = %v, want %v", got.Requests, tc.want)
			}
			for i := range tc.want {
				if got.Requests[i] != tc.want[i] {
					t.Errorf("request %d = %+v, want %+v", i, got.Requests[i], tc.want[i])
				}
			}
		})
	}
}

func TestSlice(t *testing.T) {
	tr := &Trace{Requests: []Request{{0, 1, 1}, {10 * time.Second, 2, 1}, {60 * time.Second, 3, 1}, {61 * time.Second, 4, 1}, {120 * time.Second, 5, 1}}}
	got := tr.Slice(10*time.Second, 51*time.Second) // [10s, 61s)
	want := []Request{{0, 2, 1}, {50 * time.Second, 3, 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Slice = %v, want %v", got, want)
	}
	got[0].ContextTokens = 99
	if tr.Requests[1].ContextTokens != 2 {
		t.Error("Slice shares memory with the trace")
	}
	if d := tr.Duration(); d != 120*time.Second {
		t.Errorf("Duration = %v, want 2m", d)
	}
	if n := len(tr.Slice(200*time.Second, time.Minute)); n != 0 {
		t.Errorf("slice past the end has %d requests", n)
	}
}

// TestReadAzureTrace reads the real trace the autoscaling benchmark
// replays.
func TestReadAzureTrace(t *testing.T) {
	tr, err := ReadFile("../../../test/traces/azure-llm-inference-2023-conv.csv")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tr.Requests); n != 19366 {
		t.Errorf("%d requests, want 19,366 (the trace's README)", n)
	}
	if d := tr.Duration(); d < 58*time.Minute || d > time.Hour {
		t.Errorf("duration %v, want just under an hour", d)
	}
}

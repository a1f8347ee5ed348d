package histogram

import (
	"errors"
	"testing"
)

func TestMerge(t *testing.T) {
	tests := []struct {
		name    string
		in      []*Histogram
		want    *Histogram
		wantErr error
	}{
		{
			name: "same layout adds bucket by bucket",
			in: []*Histogram{
				{Bounds: []float64{0.1, 1, inf}, Counts: []float64{1, 2, 3}, Sum: 1.5, Count: 3},
				{Bounds: []float64{0.1, 1, inf}, Counts: []float64{4, 5, 6}, Sum: 2, Count: 6},
			},
			want: &Histogram{Bounds: []float64{0.1, 1, inf}, Counts: []float64{5, 7, 9}, Sum: 3.5, Count: 9},
		},
		{
			name: "one input is a copy",
			in:   []*Histogram{{Bounds: []float64{1, inf}, Counts: []float64{1, 2}, Count: 2}},
			want: &Histogram{Bounds: []float64{1, inf}, Counts: []float64{1, 2}, Count: 2},
		},
		{
			// At 0.5 the second input has counted 4 (its le=0.25); at 0.25
			// the first has counted nothing it can vouch for.
			name: "different layouts step onto the union",
			in: []*Histogram{
				{Bounds: []float64{0.5, 1, inf}, Counts: []float64{2, 3, 4}, Count: 4},
				{Bounds: []float64{0.25, 1, 2, inf}, Counts: []float64{4, 6, 7, 8}, Count: 8},
			},
			want: &Histogram{Bounds: []float64{0.25, 0.5, 1, 2, inf}, Counts: []float64{4, 6, 9, 10, 12}, Count: 12},
		},
		{name: "nothing to merge", wantErr: ErrInvalid},
		{
			name:    "invalid input",
			in:      []*Histogram{{Bounds: []float64{1}, Counts: []float64{1}}},
			wantErr: ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Merge(tt.in...)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && !equalHist(got, tt.want) {
				t.Errorf("Merge = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestMergeDoesNotAlias(t *testing.T) {
	a := &Histogram{Bounds: []float64{1, inf}, Counts: []float64{1, 2}, Count: 2}
	got, err := Merge(a)
	if err != nil {
		t.Fatal(err)
	}
	got.Counts[0], got.Bounds[0] = 100, 100
	if a.Counts[0] != 1 || a.Bounds[0] != 1 {
		t.Errorf("Merge result shares memory with its input: %+v", a)
	}
}

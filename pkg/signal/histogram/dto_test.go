package histogram

import (
	"errors"
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func dtoHist(count uint64, sum float64, buckets ...*dto.Bucket) *dto.Metric {
	return &dto.Metric{Histogram: &dto.Histogram{
		SampleCount: proto.Uint64(count),
		SampleSum:   proto.Float64(sum),
		Bucket:      buckets,
	}}
}

func ub(le float64, c uint64) *dto.Bucket {
	return &dto.Bucket{UpperBound: proto.Float64(le), CumulativeCount: proto.Uint64(c)}
}

func ubf(le, c float64) *dto.Bucket {
	return &dto.Bucket{UpperBound: proto.Float64(le), CumulativeCountFloat: proto.Float64(c)}
}

func TestFromDTO(t *testing.T) {
	tests := []struct {
		name    string
		m       *dto.Metric
		scale   float64
		want    *Histogram
		wantErr error
	}{
		{
			name:  "implicit +Inf bucket added",
			m:     dtoHist(7, 2.5, ub(0.1, 2), ub(1, 5)),
			scale: 1,
			want:  &Histogram{Bounds: []float64{0.1, 1, inf}, Counts: []float64{2, 5, 7}, Sum: 2.5, Count: 7},
		},
		{
			name:  "explicit +Inf bucket kept",
			m:     dtoHist(7, 2.5, ub(0.1, 2), ub(inf, 6)),
			scale: 1,
			want:  &Histogram{Bounds: []float64{0.1, inf}, Counts: []float64{2, 6}, Sum: 2.5, Count: 7},
		},
		{
			name:  "milliseconds to seconds",
			m:     dtoHist(3, 1500, ub(100, 1), ub(500, 2), ub(2000, 3)),
			scale: 0.001,
			want:  &Histogram{Bounds: []float64{0.1, 0.5, 2, inf}, Counts: []float64{1, 2, 3, 3}, Sum: 1.5, Count: 3},
		},
		{
			name: "float counts",
			m: &dto.Metric{Histogram: &dto.Histogram{
				SampleCountFloat: proto.Float64(2.5),
				Bucket:           []*dto.Bucket{ubf(1, 0), ubf(2, 1.5)},
			}},
			scale: 1,
			want:  &Histogram{Bounds: []float64{1, 2, inf}, Counts: []float64{0, 1.5, 2.5}, Count: 2.5},
		},
		{
			name:  "only count and sum",
			m:     dtoHist(4, 1),
			scale: 1,
			want:  &Histogram{Bounds: []float64{inf}, Counts: []float64{4}, Sum: 1, Count: 4},
		},
		{name: "decreasing bounds", m: dtoHist(3, 0, ub(1, 1), ub(0.5, 2)), scale: 1, wantErr: ErrInvalid},
		{name: "repeated bound", m: dtoHist(3, 0, ub(1, 1), ub(1, 2)), scale: 1, wantErr: ErrInvalid},
		{name: "NaN bound", m: dtoHist(3, 0, ub(math.NaN(), 1)), scale: 1, wantErr: ErrInvalid},
		{name: "NaN count", m: dtoHist(3, 0, ubf(1, math.NaN())), scale: 1, wantErr: ErrInvalid},
		{name: "negative count", m: dtoHist(3, 0, ubf(1, -1)), scale: 1, wantErr: ErrInvalid},
		{name: "not a histogram", m: &dto.Metric{Gauge: &dto.Gauge{Value: proto.Float64(1)}}, scale: 1, wantErr: ErrInvalid},
		{name: "nil metric", scale: 1, wantErr: ErrInvalid},
		{name: "zero scale", m: dtoHist(1, 0, ub(1, 1)), scale: 0, wantErr: ErrInvalid},
		{
			name:    "native only",
			m:       &dto.Metric{Histogram: &dto.Histogram{SampleCount: proto.Uint64(1), Schema: proto.Int32(3)}},
			scale:   1,
			wantErr: ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromDTO(tt.m, tt.scale)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && !equalHist(got, tt.want) {
				t.Errorf("FromDTO = %+v, want %+v", got, tt.want)
			}
		})
	}
}

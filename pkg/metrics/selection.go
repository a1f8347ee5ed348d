package metrics

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
)

// Selection is the set of dcgm-exporter fields the exporter serves, as
// dcgm-exporter's collector CSV (-f, --collectors) or ConfigMap selects
// them. A nil *Selection selects every field.
type Selection struct {
	fields   map[*dcgm.Field]bool
	xidCount bool
}

func (s *Selection) has(f *dcgm.Field) bool { return s == nil || s.fields[f] }

func (s *Selection) hasXIDCount() bool { return s == nil || s.xidCount }

// Len returns how many fields s selects, DCGM_EXP_XID_ERRORS_COUNT included.
func (s *Selection) Len() int {
	n := len(s.fields)
	if s.xidCount {
		n++
	}
	return n
}

// maxCollectorBytes bounds a collector file: dcgm-exporter's largest shipped
// one is about 10 KiB.
const maxCollectorBytes = 1 << 20

// ParseCollectors reads a collector file in dcgm-exporter's CSV format:
// one "DCGM field, Prometheus type, help" row per line, "#" starting a
// comment. Field names may be either schema's. A row gpuscale knows but
// cannot serve (DCGM_EXP_GPU_HEALTH_STATUS, say) or a label row is skipped
// with a warning, as dcgm-exporter skips a field the GPU does not support;
// a name no schema has is an error, as is a type other than gauge, counter
// or label.
func ParseCollectors(r io.Reader) (*Selection, []string, error) {
	s := &Selection{fields: map[*dcgm.Field]bool{}}
	var warnings []string
	sc := bufio.NewScanner(io.LimitReader(r, maxCollectorBytes))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		cols := strings.SplitN(text, ",", 3)
		name := strings.TrimSpace(cols[0])
		typ := ""
		if len(cols) > 1 {
			typ = strings.TrimSpace(cols[1])
		}
		switch typ {
		case "gauge", "counter", "label":
		default:
			return nil, nil, fmt.Errorf("collector file line %d: %s: type %q, want gauge, counter or label", line, name, typ)
		}
		switch {
		case name == dcgm.XIDErrorsCount:
			s.xidCount = true
		case name == dcgm.LabelDriverVersion || name == dcgm.LabelSystemDriverVersion:
			// Served on every series whatever the file says.
		default:
			if f, _, _, ok := gpu.LookupDCGM(name); ok {
				s.fields[f] = true
				continue
			}
			if why, ok := unservedReason(name); ok {
				warnings = append(warnings, fmt.Sprintf("collector file line %d: %s is not served: %s", line, name, why))
				continue
			}
			return nil, nil, fmt.Errorf("collector file line %d: %q is a field of neither dcgm-exporter schema gpuscale knows (docs/dcgm-compatibility.md)", line, name)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("collector file: %w", err)
	}
	if s.Len() == 0 {
		return nil, nil, fmt.Errorf("collector file selects no field")
	}
	return s, warnings, nil
}

func unservedReason(name string) (string, bool) {
	for _, u := range dcgm.Unserved {
		if name == u.Name48 || name == u.Name410 {
			return u.Why, true
		}
	}
	return "", false
}

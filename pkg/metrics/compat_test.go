package metrics_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// version is one dcgm-exporter release line of the compatibility tables.
type version struct {
	name   string
	schema dcgm.Schema // gpuscale's mode that serves its names
	is49   bool        // 4.9.0: 4.10's names but the four profiling rates'
	is484  bool        // 4.8.4 and later: the opt-in power-limit and fabric rows
	host   string
}

var versions = []version{
	{"4.8.2 and earlier", dcgm.Schema48, false, false, "Hostname"},
	{"4.8.3 and 4.8.4", dcgm.Schema48, false, true, "hostname"},
	{"4.9.0", dcgm.Schema410, true, true, "hostname"},
	{"4.10.0", dcgm.Schema410, false, true, "hostname"},
}

// rowKind says whether a version's collector files have a field: in the
// default collector, as an opt-in (commented) row, or not at all.
func rowKind(f *dcgm.Field, v version) string {
	switch f.Name48 {
	case dcgm.FBTotal, dcgm.RowRemapPending, dcgm.PCIeTxThroughput, dcgm.PCIeRxThroughput:
		return "" // gpuscale's own choice, in the next table
	case dcgm.FBCapacityBytes:
		if v.schema == dcgm.Schema48 {
			return ""
		}
	case dcgm.PowerMgmtLimit, dcgm.EnforcedPowerLimit, dcgm.FabricHealthSummary, dcgm.FabricHealthMask:
		if !v.is484 {
			return ""
		}
	case dcgm.ProfNVLinkTxBytes, dcgm.ProfNVLinkRxBytes:
		if v.schema == dcgm.Schema48 {
			return ""
		}
	}
	if (v.schema == dcgm.Schema48 && f.Default48) || (v.schema == dcgm.Schema410 && f.Default410) {
		return "default"
	}
	return "opt-in"
}

func (v version) fieldName(f *dcgm.Field) string {
	if v.is49 && f.Name49 != "" {
		return f.Name49
	}
	return f.Name(v.schema)
}

func unitText(u dcgm.Unit) string {
	if u == dcgm.None {
		return ""
	}
	return u.String()
}

// compatTables renders the per-version tables of docs/dcgm-compatibility.md
// from what the builder serves, with the counts of served and not served.
func compatTables() string {
	sources := map[string]gpu.Field{}
	for _, s := range dcgm.Schemas {
		for _, f := range metrics.DCGMFields(s) {
			sources[f.Name] = f.Field
		}
	}
	var b strings.Builder
	for _, v := range versions {
		var defaults, optIns, labelsServed, unservedFields, unservedLabels int
		var rows strings.Builder
		for _, f := range gpu.DCGMFields() {
			kind := rowKind(f, v)
			if kind == "" {
				continue
			}
			name := v.fieldName(f)
			gf, ok := sources[f.Name(v.schema)]
			as := fmt.Sprintf("yes, `--dcgm-schema=%s`", v.schema)
			if name != f.Name(v.schema) {
				as = fmt.Sprintf("yes, as `%s` (`--dcgm-schema=%s`)", f.Name(v.schema), v.schema)
			}
			if !ok {
				panic("no source for " + name)
			}
			if kind == "default" {
				defaults++
			} else {
				optIns++
			}
			fmt.Fprintf(&rows, "| `%s` | %s | %s | %s | %s | %s |\n", name, f.Type, unitText(f.Unit(v.schema)), kind, as, gf.Spec().NVML)
		}
		optIns++ // DCGM_EXP_XID_ERRORS_COUNT
		fmt.Fprintf(&rows, "| `%s` | gauge | | opt-in | yes, both schemas | XID critical-error events counted per code within `--xid-count-window` (5m), labels `xid` and `window_size_in_ms` |\n", dcgm.XIDErrorsCount)
		for _, u := range dcgm.Unserved {
			name := u.Name48
			if v.schema == dcgm.Schema410 {
				name = u.Name410
			}
			if strings.Contains(u.Why, "label row") {
				unservedLabels++
			} else {
				unservedFields++
			}
			fmt.Fprintf(&rows, "| `%s` | | | opt-in | **no** | %s |\n", name, u.Why)
		}
		labels := []struct{ name, how string }{
			{"gpu", "NVML index"}, {"UUID", "`nvmlDeviceGetUUID` (the parent GPU's for a MIG instance)"},
			{"pci_bus_id", "`nvmlDeviceGetPciInfo`"}, {"device", "`nvidia` + `nvmlDeviceGetMinorNumber`"},
			{"modelName", "`nvmlDeviceGetName`"}, {"GPU_I_PROFILE", "the MIG instance's profile (empty on whole GPUs)"},
			{"GPU_I_ID", "the MIG GPU instance ID (empty on whole GPUs)"},
			{v.host, "`--hostname` (the node name)"},
			{v.schema.DriverVersionLabel(), "`nvmlSystemGetDriverVersion`"},
			{"container, namespace, pod", "the kubelet's pod-resources API"},
			{"pod_uid", "`--kubernetes-enable-pod-uid`, from the API server"},
			{"pod labels", "`--kubernetes-enable-pod-labels`, from the API server, sanitized, at most 16 a pod"},
		}
		for _, l := range labels {
			labelsServed++
			fmt.Fprintf(&rows, "| label `%s` | | | | yes | %s |\n", l.name, l.how)
		}
		fmt.Fprintf(&b, "### dcgm-exporter %s\n\n", v.name)
		fmt.Fprintf(&b, "**Served: all %d default fields, %d opt-in fields, %d labels. Not served: %d opt-in fields, %d opt-in label rows.** ",
			defaults, optIns, labelsServed, unservedFields, unservedLabels)
		fmt.Fprintf(&b, "gpuscale serves these names with `--dcgm-schema=%s`", v.schema)
		if v.schema == dcgm.Schema48 {
			b.WriteString(", with both `Hostname` and `hostname`.\n\n")
		} else {
			b.WriteString(".\n\n")
		}
		b.WriteString("| Field or label | Type | Unit | In dcgm-exporter's collector | Served by gpuscale | NVML source, or why not |\n|---|---|---|---|---|---|\n")
		b.WriteString(rows.String())
		b.WriteString("\n")
	}
	return b.String()
}

const (
	beginTables = "<!-- BEGIN GENERATED TABLES (go test ./pkg/metrics -run TestCompatibilityTables -update) -->\n"
	endTables   = "<!-- END GENERATED TABLES -->\n"
)

// TestCompatibilityTables keeps docs/dcgm-compatibility.md's per-version
// tables equal to what the exporter serves.
func TestCompatibilityTables(t *testing.T) {
	path := "../../docs/dcgm-compatibility.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, beginTables), strings.Index(doc, endTables)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated-tables markers", path)
	}
	want := compatTables()
	if *update {
		doc = doc[:i+len(beginTables)] + want + doc[j:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := doc[i+len(beginTables) : j]; got != want {
		t.Errorf("%s's tables differ from what the exporter serves (go test ./pkg/metrics -run TestCompatibilityTables -update):\n%s", path, lineDiff(got, want))
	}
}

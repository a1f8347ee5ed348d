package kedascaler

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// Trigger metadata keys: the contract of a ScaledObject's gpuscale trigger
// (docs/keda.md).
const (
	KeySignal           = "signal"
	KeyModel            = "model"
	KeyRole             = "role"
	KeyObject           = "object"
	KeyTarget           = "target"
	KeyActivationTarget = "activationTarget"
)

// kedaKeys are the external scaler's own metadata, which KEDA passes on
// with the rest: they configure KEDA's client, not the value.
var kedaKeys = map[string]bool{"scalerAddress": true, "enableTLS": true, "unsafeSsl": true}

// fromEnvSuffix: KEDA resolves `keyFromEnv: VAR` from the scale target's
// environment and passes the value under the same suffixed key.
const fromEnvSuffix = "FromEnv"

// Scope kinds.
const (
	scopeModel       = "model"
	scopeDeployment  = "deployment"
	scopeStatefulSet = "statefulset"
)

// trigger is one ScaledObject trigger's parsed metadata.
type trigger struct {
	namespace string // always the ScaledObject's
	signal    string
	// scope is model, deployment or statefulset; name is the model's or
	// the object's name.
	scope, name string
	// role, with a model, is the pool of the model's pods read: prefill
	// or decode; empty: all of them.
	role       string
	target     float64
	activation float64
}

// metricName is the name GetMetricSpec gives KEDA (which prefixes the
// trigger's index): the signal and its scope, in characters an external
// metric's name may hold.
func (t trigger) metricName() string {
	name := "gpuscale-" + t.signal + "-" + t.scope + "-" + t.name
	if t.role != "" {
		name += "-" + t.role
	}
	return sanitize(name)
}

func (t trigger) String() string {
	if t.role != "" {
		return fmt.Sprintf("%s of %s %s/%s, role %s", t.signal, t.scope, t.namespace, t.name, t.role)
	}
	return fmt.Sprintf("%s of %s %s/%s", t.signal, t.scope, t.namespace, t.name)
}

func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

// catalog says which signals are served in which scope: per model
// (external metrics) and per Deployment or StatefulSet (custom metrics).
type catalog struct {
	model, object map[string]bool
	// roles are the signals served per model and role.
	roles map[string]bool
}

func (c catalog) known(signal string) bool { return c.model[signal] || c.object[signal] }

func (c catalog) names() string {
	seen := map[string]bool{}
	for s := range c.model {
		seen[s] = true
	}
	for s := range c.object {
		seen[s] = true
	}
	return sortedKeys(seen)
}

func sortedKeys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// parseTrigger reads ref's metadata. Its errors are gRPC statuses that
// name the key or signal at fault: InvalidArgument for wrong or missing
// metadata, NotFound for a signal gpuscale does not serve.
func parseTrigger(ref *pb.ScaledObjectRef, c catalog) (trigger, error) {
	if ref == nil {
		return trigger{}, status.Error(codes.InvalidArgument, "no ScaledObject reference")
	}
	if errs := validation.IsDNS1123Label(ref.GetNamespace()); len(errs) > 0 {
		return trigger{}, invalid("the ScaledObject's namespace %s: %s", quote(ref.GetNamespace()), strings.Join(errs, "; "))
	}
	md, err := normalizeKeys(ref.GetScalerMetadata())
	if err != nil {
		return trigger{}, err
	}
	t := trigger{namespace: ref.GetNamespace(), signal: md[KeySignal]}
	if t.signal == "" {
		return trigger{}, invalid("metadata %q is required: a signal gpuscale serves (%s)", KeySignal, c.names())
	}
	if !c.known(t.signal) {
		return trigger{}, status.Errorf(codes.NotFound, "signal %s is not served by gpuscale; served: %s", quote(t.signal), c.names())
	}
	if err := t.parseScope(md, c); err != nil {
		return trigger{}, err
	}
	if t.target, err = parseNumber(md, KeyTarget, true); err != nil {
		return trigger{}, err
	}
	if t.target <= 0 || t.target > maxTarget {
		return trigger{}, invalid("metadata %q must be positive and at most 2^53, got %s", KeyTarget, quote(md[KeyTarget]))
	}
	if t.activation, err = parseNumber(md, KeyActivationTarget, false); err != nil {
		return trigger{}, err
	}
	if t.activation < 0 || t.activation > maxTarget {
		return trigger{}, invalid("metadata %q must be at least 0 and at most 2^53, got %s", KeyActivationTarget, quote(md[KeyActivationTarget]))
	}
	return t, nil
}

// normalizeKeys folds `keyFromEnv` into key and rejects keys the contract
// does not have: a misspelt key would otherwise be silently ignored.
func normalizeKeys(in map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(in))
	known := map[string]bool{KeySignal: true, KeyModel: true, KeyRole: true, KeyObject: true, KeyTarget: true, KeyActivationTarget: true}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key named is the same every time
	for _, k := range keys {
		v := in[k]
		if kedaKeys[k] {
			continue
		}
		if k == "namespace" {
			return nil, invalid("metadata %q is not accepted: the ScaledObject's own namespace is always read", k)
		}
		base := strings.TrimSuffix(k, fromEnvSuffix)
		if !known[base] {
			return nil, invalid("metadata %s is unknown; gpuscale reads %s, %s (and %s) or %s, %s, %s", quote(k), KeySignal, KeyModel, KeyRole, KeyObject, KeyTarget, KeyActivationTarget)
		}
		if _, dup := out[base]; dup {
			return nil, invalid("metadata %s is given twice (as %s and %s%s)", quote(base), quote(base), quote(base), fromEnvSuffix)
		}
		out[base] = strings.TrimSpace(v)
	}
	return out, nil
}

func (t *trigger) parseScope(md map[string]string, c catalog) error {
	model, hasModel := md[KeyModel]
	object, hasObject := md[KeyObject]
	if role, ok := md[KeyRole]; ok {
		switch {
		case !hasModel:
			return invalid("metadata %q goes with %q: a Deployment's or StatefulSet's role is its pod template's (docs/metrics.md)", KeyRole, KeyModel)
		case role != "prefill" && role != "decode":
			return invalid("metadata %q %q: want prefill or decode", KeyRole, role)
		case !c.roles[t.signal]:
			return invalid("signal %q is not served per model and role (metadata %q); per role: %s", t.signal, KeyRole, sortedKeys(c.roles))
		}
		t.role = role
	}
	switch {
	case hasModel == hasObject:
		return invalid("exactly one of metadata %q (a model's value over the namespace) or %q (deployment/NAME or statefulset/NAME) is required", KeyModel, KeyObject)
	case hasModel:
		if !c.model[t.signal] {
			return invalid("signal %q is not served per model (metadata %q); per model: %s; use %q for the others", t.signal, KeyModel, sortedKeys(c.model), KeyObject)
		}
		// The served name is taken as it is (a Hugging Face id's '/'
		// included) and selected by its label value.
		model = provider.ModelLabelValue(model)
		if errs := validation.IsValidLabelValue(model); model == "" || len(errs) > 0 {
			return invalid("metadata %q %s is not a model name gpuscale can select: %s", KeyModel, quote(model), strings.Join(append(errs, "a non-empty label value is required"), "; "))
		}
		t.scope, t.name = scopeModel, model
	default:
		kind, name, ok := strings.Cut(object, "/")
		if !ok || (kind != scopeDeployment && kind != scopeStatefulSet) {
			return invalid("metadata %q %s must be deployment/NAME or statefulset/NAME", KeyObject, quote(object))
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return invalid("metadata %q %s: the name %s", KeyObject, quote(object), strings.Join(errs, "; "))
		}
		if !c.object[t.signal] {
			return invalid("signal %q is not served for a %s (metadata %q); for objects: %s", t.signal, kind, KeyObject, sortedKeys(c.object))
		}
		t.scope, t.name = kind, name
	}
	return nil
}

func parseNumber(md map[string]string, key string, required bool) (float64, error) {
	s, ok := md[key]
	if !ok {
		if required {
			return 0, invalid("metadata %q is required: a positive number", key)
		}
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, invalid("metadata %q %s is not a finite number", key, quote(s))
	}
	return v, nil
}

// maxTarget bounds a target: 2^53, past which a float64 no longer counts
// units, and whose thousandths (KEDA makes a milli-quantity of it) an int64
// still holds. gpuscale's largest value, a Deployment's GPU memory in
// bytes, stays far below it.
const maxTarget = 1 << 53

// maxQuoted bounds what of a client's metadata an error repeats: a value
// may be tens of kilobytes, and errors go to KEDA's log and events.
const maxQuoted = 64

// quote quotes a client's string for an error, cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("... (%d bytes)", len(s))
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

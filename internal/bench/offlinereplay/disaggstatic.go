package offlinereplay

// StaticDisagg sizes static provisioning of both pools for cfg (its
// Policy ignored): the fewest decode replicas, with up to limit prefill
// replicas, that meet the most minutes any count up to limit meets, then
// the fewest prefill replicas that, with those, meet as many. The pools
// are sized in hindsight, for the peak, as StaticNeed sizes one pool.
func StaticDisagg(cfg DisaggConfig, limit int) (sizes [numPools]int, res DisaggResult, err error) {
	cfg.Policy = nil
	run := func(p, d int) (DisaggResult, error) {
		c := cfg
		c.Initial = [numPools]int{p, d}
		return RunDisagg(c)
	}
	best, bestD := -1, limit
	for d := 1; d <= limit; d++ {
		r, err := run(limit, d)
		if err != nil {
			return sizes, res, err
		}
		if r.MinutesMet > best {
			best, bestD = r.MinutesMet, d
		}
		if r.MinutesMet == len(r.MetMinute) {
			break
		}
	}
	for p := 1; p <= limit; p++ {
		r, err := run(p, bestD)
		if err != nil {
			return sizes, res, err
		}
		if r.MinutesMet >= best {
			return [numPools]int{p, bestD}, r, nil
		}
	}
	r, err := run(limit, bestD)
	return [numPools]int{limit, bestD}, r, err
}

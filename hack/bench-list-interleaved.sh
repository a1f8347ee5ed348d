#!/usr/bin/env bash
# Interleaves runs of the 10,000-pod list benchmark from two test binaries,
# so that a host whose speed drifts affects both alike. Build them with
#   (cd OLD_CHECKOUT && go test -c -o /tmp/old.test ./pkg/provider/)
#   go test -c -o /tmp/new.test ./pkg/provider/
# then: hack/bench-list-interleaved.sh /tmp/old.test /tmp/new.test 6 > out.txt
# and compare with benchstat (old and new lines are prefixed).
set -euo pipefail
old=${1:?old test binary} new=${2:?new test binary} rounds=${3:-6}
cd "$(dirname "$0")/../pkg/provider"
for ((r = 1; r <= rounds; r++)); do
	for bin in "$old" "$new"; do
		tag=old
		[[ $bin == "$new" ]] && tag=new
		"$bin" -test.run '^$' -test.bench 'BenchmarkPodsBySelector10k' -test.benchtime 200x -test.benchmem |
			grep '^Benchmark' | sed "s/^/$tag /"
	done
done

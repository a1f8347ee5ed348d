#!/usr/bin/env bash
# make demo: runs the exporter on simulated GPUs and simulated vLLM servers
# on loopback, drives a load step, and shows the signals respond.
set -euo pipefail
cd "$(dirname "$0")/.."
out=_output/demo
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

bin/exporter --backend=sim --sim-gpus=8 --pod-resources-socket= --web.listen-address=127.0.0.1:19400 --hostname=demo-node >"$out/exporter.log" 2>&1 &
pids+=($!)
bin/inferencesim --listen=127.0.0.1:18000,127.0.0.1:18001 --dialect=vllm --rate=2 >"$out/inferencesim.log" 2>&1 &
pids+=($!)
for url in http://127.0.0.1:19400/readyz http://127.0.0.1:18000/healthz http://127.0.0.1:18001/healthz; do
  for _ in $(seq 50); do curl -fsS "$url" >/dev/null 2>&1 && break; sleep 0.2; done
done

show() {
  echo "  GPU 0 utilization: $(curl -s 127.0.0.1:19400/metrics | awk '/^DCGM_FI_DEV_GPU_UTIL\{/ && /gpu="0"/ {print $NF; exit}')%"
  echo "  vLLM queue (server 0): $(curl -s 127.0.0.1:18000/metrics | awk '/^vllm:num_requests_waiting/ {print $NF; exit}')"
}
echo "exporter (8 simulated H100s): http://127.0.0.1:19400/metrics  /api/v1/gpus"
echo "simulated vLLM servers:        http://127.0.0.1:18000/metrics  http://127.0.0.1:18001/metrics"
echo "before the load step:"; show
curl -fsS -XPUT 127.0.0.1:18000/api/v1/load -d '{"rate": 40}' >/dev/null
curl -fsS -XPUT 127.0.0.1:19400/api/v1/sim/gpus/0 -d '{"utilization": 95, "memoryUsedMiB": 70000}' >/dev/null
sleep 3
echo "3s after a load step to 40 req/s on server 0 (and GPU 0 at 95%):"; show
echo "running until interrupted (Ctrl-C); logs in $out/"
wait

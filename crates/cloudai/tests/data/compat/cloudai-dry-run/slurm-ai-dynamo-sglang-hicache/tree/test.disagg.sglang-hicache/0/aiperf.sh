#!/usr/bin/env bash
set -Eeuo pipefail

log() { echo "[$(date +%F\ %T) $(hostname)]: $*"; }

: "${FRONTEND_URL:?FRONTEND_URL is not set}"
: "${AIPERF_MODEL:=Qwen/Qwen3-0.6B}"
: "${AIPERF_ENDPOINT:=v1/chat/completions}"
: "${AIPERF_FAILURE_MARKER:=/cloudai_run_results/failure-marker.txt}"

log 'Running aiperf setup: bash -lc '"'"'python -m pip install --break-system-packages --ignore-installed blinker==1.9.0 && python -m pip install --break-system-packages --upgrade aiperf==0.8.0'"'"''
bash -lc 'python -m pip install --break-system-packages --ignore-installed blinker==1.9.0 && python -m pip install --break-system-packages --upgrade aiperf==0.8.0'

rm -rf /cloudai_run_results/aiperf_artifacts
mkdir -p /cloudai_run_results/aiperf_artifacts
log 'Running aiperf: aiperf profile --model Qwen/Qwen3-0.6B --endpoint-type chat --streaming --url "$FRONTEND_URL" --concurrency 1 --extra-inputs '"'"'{"min_tokens":10}'"'"' --output-tokens-mean 32 --request-count 10 --synthetic-input-tokens-mean 128 --artifact-dir /cloudai_run_results/aiperf_artifacts --no-server-metrics'
phase_status=0
set +e
aiperf profile --model Qwen/Qwen3-0.6B --endpoint-type chat --streaming --url "$FRONTEND_URL" --concurrency 1 --extra-inputs '{"min_tokens":10}' --output-tokens-mean 32 --request-count 10 --synthetic-input-tokens-mean 128 --artifact-dir /cloudai_run_results/aiperf_artifacts --no-server-metrics
phase_status=$?
set -e
if [[ "$phase_status" -ne 0 ]]; then
  log 'AIPerf phase aiperf failed'
  exit "$phase_status"
fi
if [[ "$phase_status" -eq 0 ]]; then
  mkdir -p /cloudai_run_results
  cp /cloudai_run_results/aiperf_artifacts/profile_export_aiperf.csv /cloudai_run_results/aiperf_report.csv
  log 'AIPerf report saved to /cloudai_run_results/aiperf_report.csv'
fi

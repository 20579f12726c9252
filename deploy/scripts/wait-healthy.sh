#!/usr/bin/env bash
# wait-healthy.sh PROJECT SECONDS: wait until every container of the compose
# project is healthy (or, for one-shots, exited 0). Prints the laggards and
# their last log lines on timeout.
set -euo pipefail
project=${1:-sluice}
limit=${2:-180}
deadline=$((SECONDS + limit))
while :; do
  bad=()
  while read -r name state health code; do
    case "$state/$health" in
      running/healthy) ;;
      exited/*) [ "$code" = 0 ] || bad+=("$name(exited $code)") ;;
      *) bad+=("$name($state/$health)") ;;
    esac
  done < <(docker ps -a --filter "label=com.docker.compose.project=$project" \
             --format '{{.Names}}' | xargs -r docker inspect \
             --format '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}}' | sed 's#^/##')
  if [ ${#bad[@]} -eq 0 ]; then
    echo "fleet healthy: $(docker ps --filter "label=com.docker.compose.project=$project" -q | wc -l) containers running"
    exit 0
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "not healthy after ${limit}s: ${bad[*]}" >&2
    for b in "${bad[@]}"; do n=${b%%(*}; echo "--- $n" >&2; docker logs --tail 15 "$n" >&2 || true; done
    exit 1
  fi
  sleep 2
done

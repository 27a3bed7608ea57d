#!/usr/bin/env bash
# Render the vLLM CI job's summary (Markdown, on stdout) from one or more job output folders.
#
#   .ci/vllm-summary.sh OUT [OUT ...]
#
# Each OUT is a folder .ci/vllm-job.sh wrote (KVCONFORM_CI_VLLM_OUT): its summary-head.txt (one line: when, how
# long, load, disk) and summary-rows.txt (one step a line: release|step|status|wall seconds|CPU seconds|note). The
# job renders its own OUT/summary.md with this script, also when it fails or is interrupted; the GitHub Actions
# workflow's last job renders one summary of every release's runner (one runner per release). Per release, the
# closing list says how long installing took and how long judging took (every other step), in wall and CPU
# seconds, so a warm cache shows as an install of a few seconds. A release's "judging|total" row, when there is one,
# gives its judging wall time as the clock saw it (steps that ran beside each other count once); without it the
# steps' wall times are added up. Its "judged|total" row, when there is one, gives "the release judged": the wall
# and CPU seconds of the steps whose verdicts are about the release's own code (the matrix, allocator and connector
# steps, .ci/vllm-job.sh's JUDGED_STEPS), which run first; it is part of judging, not added to it.
set -euo pipefail
(( $# )) || { echo "usage: .ci/vllm-summary.sh OUT [OUT ...]" >&2; exit 2; }
for out in "$@"; do
    [[ -f $out/summary-rows.txt ]] || { echo "vllm-summary: $out has no summary-rows.txt (not an output of .ci/vllm-job.sh)" >&2; exit 2; }
done

for out in "$@"; do
    echo "# vLLM CI job: $(cat "$out/summary-head.txt" 2>/dev/null || echo "(no header)")"
done
echo
echo "| release | step | status | wall s | CPU s | note |"
echo "| --- | --- | --- | --- | --- | --- |"
cat "${@/%//summary-rows.txt}" | while IFS='|' read -r r s st sec cpu note; do
    echo "| $r | $s | $st | $sec | $cpu | $note |"
done
echo
echo "Install and judging per release (wall seconds, CPU seconds):"
echo
cat "${@/%//summary-rows.txt}" | awk -F'|' '
    !($1 in seen) { seen[$1] = 1; order[++n] = $1 }
    $2 == "install" || $2 == "lmcache-install" { install[$1] += $4; install_cpu[$1] += $5; next }
    $2 == "judging" && $3 == "total" { total[$1] = $4; next }
    $2 == "judged" && $3 == "total" { judged[$1] = $4; judged_cpu[$1] = $5; next }
    { judge[$1] += $4; judge_cpu[$1] += $5 }
    END { for (i = 1; i <= n; i++) { r = order[i]
              printf "- %s: install %d s (%d CPU s), judging %d s (%d CPU s)", r, install[r], install_cpu[r],
                     (r in total) ? total[r] : judge[r], judge_cpu[r]
              if (r in judged) printf "; of it the release judged (matrix, allocator, connectors) %d s (%d CPU s)",
                                      judged[r], judged_cpu[r]
              printf "\n" } }'

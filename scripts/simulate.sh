#!/usr/bin/env bash
# The global-quota simulation (sim/): 1,000 hosts on a fake clock, each a
# real table spending from the real pull script run in Lua 5.1 over a model
# of Redis, in five shapes of demand (uniform, Zipf, bursty, churn, 10 % of
# clocks 200 ms ahead), and the seed's deployment (30 hosts × 50 processes),
# all at 500 k/s. Writes benches/SIMULATION.md and benches/simulation.png.
# SLICES=N (default 10) measured slices per scenario after the cold one;
# extra arguments go to the simulator (e.g. --only uniform,seed).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
slices="${SLICES:-10}"
cargo build --release -q -p flowctrl-sim
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "matplotlib>=3.8,<4"
began=$(date +%s)
./target/release/flowctrl-sim --slices "$slices" --csv target/simulation.csv "$@" > target/simulation.md
took=$(( $(date +%s) - began ))
began=$(date +%s)
./target/release/flowctrl-sim keys --hosts 1000 --slices 5 > target/simulation-keys.md
took_keys=$(( $(date +%s) - began ))
{
    echo "# Global quota simulation"
    echo
    echo "Simulated $(date -u +%F) on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, in $took s."
    echo "Produced by \`./scripts/simulate.sh\` (\`flowctrl-sim --slices $slices $*\`): $slices full"
    echo "slices of 1 s per scenario after a cold first one, \`global_rate\` 500 k/s, demand"
    echo "1.25 × the rate, 1 ms ticks. Each host is a real table; its pulls run the crate's"
    echo "pull script in Lua 5.1 over a model of Redis, on the simulated clock."
    echo
    cat target/simulation.md
    echo
    echo "- *admitted/quota*: over the full slices (the cold one apart: no host has history)."
    echo "- *stranded*: granted to the hosts in a slice and not admitted by its end, over the quota."
    echo "- *store ops*: pull-script calls (round trips) per admitted request."
    echo "- *smallest host / fair share*: what the host asking least admitted, over its max-min"
    echo "  fair share of the slice (min(its demand, the water level)); *worst host*: the lowest"
    echo "  such ratio of any host in any full slice."
    echo "  Hosts that join or leave in a slice are not judged for it."
    echo "- *skewed*: each skewed host measures its -200 ms offset at its first pull (the"
    echo "  simulated round trip takes no time) and cuts the store's slices from then on, so"
    echo "  its row is uniform's."
    echo "- Budgets: admitted within [0.98, 1.01] × quota in every full slice, store ops per"
    echo "  admitted ≤ 0.01, stranded ≤ 2 %. Where the misses come from: benches/GLOBAL.md,"
    echo "  \"The simulation\"; \`sim/src/report.rs\`, \`KNOWN_MISSES\`."
    echo
    echo "![admitted and stranded per slice](simulation.png)"
    echo
    echo "## Keys' global rates"
    echo
    echo "Simulated in $took_keys s by \`flowctrl-sim keys --hosts 1000 --slices 5\`: 1,000 hosts, each a"
    echo "real table with one keyed task whose keys carry a global rate of 10/s (1 s slices),"
    echo "calling the crate's \`keyed.lua\` over the model of Redis. Slice 0 is the cold one."
    echo "*zipf-keys*: a million keys by Zipf(1.1), 500 k requests/s, each at a host drawn at"
    echo "random; *-pinned*: each key at one host of its own (a load balancer hashing the key),"
    echo "allowance 9; *one-host-key*: one key asked 100/s on one host; *one-host-under*: one key"
    echo "of 100/s asked 50/s on one host (both at random instants: a request in a 1 ms tick by"
    echo "chance); *spread-key*: one key asked"
    echo "5/s on every host; *thin-key*: one key asked 0.2/s on every host (a host past its"
    echo "allowance now and then). Each host's keeper looks every 10 ms, as its thread does."
    echo
    cat target/simulation-keys.md
    echo
    echo "- *keys over limit*: keys asked more than 10 in the slice; *worst*: the most admitted of"
    echo "  any, over the limit; *past 1.01 × limit*: how many admitted more; *excess*: what they"
    echo "  admitted past 1.01 × limit, over all admissions."
    echo "- *under-limit keys admitted*: admitted over asked, over the keys asked at most 10;"
    echo "  *short*: such keys admitted less than 0.99 of what they asked."
    echo "- *round trips*: every call, the hosts' slice-end calls with nothing to ask included (a"
    echo "  host's heartbeat: one a second even when idle, so 999 idle hosts cost *one-host-key* 100"
    echo "  round trips per admission)."
    echo "- *store fields*: fields of the model's key hashes at the slice's end (one per key and"
    echo "  slice that pulled, and the names of the hot keys, up to 2 a call; on a real Redis"
    echo "  80 bytes per key that pulled a slice, names included,"
    echo "  \`tests/keyed_global.rs\`)."
    echo "- Budgets and misses: \`sim/src/keyed.rs\`, \`misses\`; the design and its known limits:"
    echo "  docs/design/keyed-global.md."
} > target/SIMULATION.md.new
"$VENV/bin/python" sim/plot.py target/simulation.csv benches/simulation.png
mv target/SIMULATION.md.new benches/SIMULATION.md
cat benches/SIMULATION.md

# shellcheck shell=bash disable=SC2034 # NET, HEAD, NETNS and started are for the caller
# fixture.sh - the netns hosts of the benchmarks (testhosts), sourced by bench/coll.sh and
# bench/plugins.sh. Needs TH (the testhosts binary), STATE (its state folder) and die().
#
# fixture_up N: N hosts up, or reuse the ones up in STATE when KEEP_HOSTS=1 finds at least
# N; sets started=1 when it brought them up (the caller's cleanup takes them down), and
# NET (the subnet's first three octets), HEAD (the command prefix that runs under the
# private /etc/hosts) and NETNS (the hosts' network namespaces). It refuses to go on
# unless h1 and hN resolve, through that hosts file, into the fixture's own subnet.
fixture_up() {
  local n=$1 h ip
  if [ "${KEEP_HOSTS:-0}" = 1 ] && "$TH" --state "$STATE" status >/dev/null 2>&1 &&
    [ "$(eval "$("$TH" --state "$STATE" env)"; echo "$TESTHOSTS_N")" -ge "$n" ]; then
    echo "reusing the hosts up in $STATE" >&2
  else
    mkdir -p "$(dirname "$STATE")"
    started=1 # also when up fails halfway: down removes what it left
    "$TH" --state "$STATE" up "$n" >&2
  fi
  eval "$("$TH" --state "$STATE" env)"
  [[ "$TESTHOSTS_SUBNET" =~ ^10\.213\.[0-9]+\.0/24$ ]] || die "unexpected subnet $TESTHOSTS_SUBNET"
  NET=${TESTHOSTS_SUBNET%.0/24}
  HEAD=("$TH" --state "$STATE" head)
  # Never launch unless the names resolve, from the private hosts file, into our subnet.
  for h in h1 "h$n"; do
    ip=$("${HEAD[@]}" getent hosts "$h" | awk '{print $1; exit}')
    [[ "$ip" == "$NET".* ]] || die "$h resolves to '$ip' under testhosts head, not into $TESTHOSTS_SUBNET"
  done
  mapfile -t NETNS < <("$TH" --state "$STATE" status 2>/dev/null | sed -n 's/.* netns=\([^ ]*\) .*/\1/p')
}

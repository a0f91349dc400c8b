package redis

import "strings"

// neededFlags are the notify-keyspace-events flags the collector needs: K
// keyspace channels (__keyspace@<db>__:<key>, so the server filters by
// pattern), g generic (del, expire, rename), $ string (set), h hash
// (hset, hincrby, hdel), x expired, e evicted.
const neededFlags = "Kg$hxe"

// allFlags is what the alias A stands for (redis notify.c: every class but
// the keyspace/keyevent channels, key-miss and new-key).
const allFlags = "g$lshzxetd"

// missingFlags returns the needed flags that the server's current
// notify-keyspace-events value lacks, in neededFlags order.
func missingFlags(current string) string {
	have := current
	if strings.ContainsRune(current, 'A') {
		have += allFlags
	}
	var missing strings.Builder
	for _, f := range neededFlags {
		if !strings.ContainsRune(have, f) {
			missing.WriteRune(f)
		}
	}
	return missing.String()
}

// withFlags returns current plus the missing flags: the collector adds to
// the server's setting and never removes what someone else enabled.
func withFlags(current, missing string) string { return current + missing }

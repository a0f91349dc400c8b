package zookeeper

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// markers end the part of a contender's name before its sequence number:
// "lock-" (the documented lock recipe, go-zookeeper's zk.Lock and Curator's
// InterProcessMutex and LeaderSelector: _c_<guid>-lock-<seq>), "latch-"
// (Curator's LeaderLatch: _c_<uuid>-latch-<seq>), "n_" (the documented
// election recipe: guid-n_<seq>), and kazoo's "__lock__" (Lock, WriteLock
// and Election: <uuid hex>__lock__<seq>) and readMarker.
var markers = []string{"lock-", "latch-", "n_", "__lock__", readMarker}

// readMarker is kazoo's ReadLock's: <uuid hex>__rlock__<seq>. A reader
// waits only for the write nodes (__lock__) below it, so the readers at the
// head of a directory hold it together (kazoo/recipe/lock.py).
const readMarker = "__rlock__"

// isReader reports whether a contender's node is kazoo's ReadLock's.
func isReader(name string) bool {
	i := strings.LastIndex(name, readMarker)
	return i >= 0 && len(name)-i-len(readMarker) <= seqDigits+1
}

// seqDigits is the width ZooKeeper writes a sequence number in ("%010d");
// past 2147483647 the parent's counter wraps to -2147483648, one wider.
const seqDigits = 10

// parseSeq returns the sequence number of a contender's node name: the
// digits after the last recipe marker, as the recipes' own clients sort
// them. A name without one (a foreign child, or a lock directory) is not a
// contender.
func parseSeq(name string) (int64, bool) {
	for _, m := range markers {
		i := strings.LastIndex(name, m)
		if i < 0 {
			continue
		}
		digits := name[i+len(m):]
		if len(digits) != seqDigits && !(len(digits) == seqDigits+1 && digits[0] == '-') {
			continue
		}
		seq, err := strconv.ParseInt(digits, 10, 32)
		if err != nil {
			continue
		}
		return seq, true
	}
	return 0, false
}

// node is one contender: an ephemeral sequential child of a lock directory,
// as the collector last read it.
type node struct {
	name  string // the child's name, raw
	seq   int64
	czxid int64 // the zxid of its creation: the fencing token
	owner int64 // ephemeralOwner: the session that created it (0: persistent)
	data  string
	// reader: a kazoo ReadLock's node, which holds together with the
	// readers next to it.
	reader bool
}

// holder renders who holds through n: the owner session in hex (the form
// ZooKeeper's own logs and four-letter words print), and the node's data
// when it has any (an election participant's id, Curator's default: the
// host's address).
func (n node) holder() string {
	h := "0x" + strconv.FormatInt(n.owner, 16)
	if n.data != "" {
		h += " " + n.data
	}
	return h
}

// dir is what the collector last read of one lock directory: its
// contenders sorted by sequence number, the owner first.
type dir struct {
	path     string // the lock's name: the directory's path below the chroot
	nodes    []node
	pzxid    int64 // the zxid of the last change to its children
	creates  int64 // children ever created under it, from its cversion
	foreign  int   // children that are no recipe's contenders
	readZxid int64 // the highest zxid the read of it showed
	created  int64 // the directory's own czxid: a new one is a new directory
	// unseen counts, while the lock is free, the contenders created since
	// it was last held that no read showed: any of them may have held it,
	// so the next grant counts them. Set by record on a new read only.
	unseen int64
}

// owner returns the lowest-sequence contender, which every lowest-sequence
// recipe gives the lock to, or nil when there is none. When it is a kazoo
// reader, the readers right after it hold with it (sharing).
func (d *dir) owner() *node {
	if d == nil || len(d.nodes) == 0 {
		return nil
	}
	return &d.nodes[0]
}

// sortNodes orders contenders by sequence number, as the recipes do; the
// creation zxid breaks ties (two parents' children never meet in one dir).
func sortNodes(nodes []node) {
	slices.SortFunc(nodes, func(a, b node) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), cmp.Compare(a.czxid, b.czxid))
	})
}

// createsOf returns how many children were ever created under a node from
// what its Stat shows: ZooKeeper bumps its internal child version on
// creates only and clients see cversion*2 - numChildren.
func createsOf(cversion, numChildren int32) int64 {
	return (int64(cversion) + int64(numChildren)) / 2
}

// handover is one lock's change of hands between two reads of its
// directory: the holding that ended (nil: none) and the one granted (nil:
// none). Both are set when the owner was replaced.
type handover struct {
	lock    string
	ended   *node
	granted *node
	unseen  int64 // creates the reads did not show: contenders that came and went between them
	pzxid   int64
}

// diff compares two reads of one lock directory (before nil: not read
// before; after nil: gone) and returns how the lock changed hands, or false
// when its owner stayed.
func diff(before, after *dir) (handover, bool) {
	h, changed := handOver(before, after)
	if h.granted != nil {
		h.unseen = unseenSince(before, after)
	}
	return h, changed
}

// unseenSince counts the contenders created under after's directory that
// no read showed since it was last held: those created between before and
// after that after does not show, and those before already counted. A
// directory read for the first time, or created again since before, is new
// since the last read of its parent, so all of its creates count.
func unseenSince(before, after *dir) int64 {
	if after == nil {
		return 0
	}
	if before == nil || before.created != after.created {
		before = &dir{}
	}
	n := after.creates - before.creates - int64(newNodes(before, after)+max(0, after.foreign-before.foreign))
	return before.unseen + max(0, n)
}

// handOver is diff without the count of unseen contenders.
func handOver(before, after *dir) (handover, bool) {
	was, is := before.owner(), after.owner()
	if was != nil && is != nil && was.czxid == is.czxid {
		return handover{}, false
	}
	if was == nil && is == nil {
		return handover{}, false
	}
	h := handover{ended: was, granted: is}
	if after != nil {
		h.lock, h.pzxid = after.path, after.pzxid
	} else {
		h.lock = before.path
	}
	return h, true
}

// newNodes counts after's contenders that before did not have.
func newNodes(before, after *dir) int {
	seen := make(map[int64]bool, len(before.nodes))
	for _, n := range before.nodes {
		seen[n.czxid] = true
	}
	count := 0
	for _, n := range after.nodes {
		if !seen[n.czxid] {
			count++
		}
	}
	return count
}

// sharing counts the contenders that hold d together: the readers at its
// head when its owner is a kazoo reader, else the owner alone (1), or 0
// when it is free. The collector records the owner as the holder; a reader
// that shared the hold and outlasts it is recorded as granted when it
// becomes the owner.
func (d *dir) sharing() int {
	if d.owner() == nil {
		return 0
	}
	n := 1
	for n < len(d.nodes) && d.nodes[0].reader && d.nodes[n].reader {
		n++
	}
	return n
}

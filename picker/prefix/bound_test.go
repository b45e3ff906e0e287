package prefix

// bound returns the most blocks a worker given capacity may hold now: the
// smaller of capacity and its fair share of the cap among the workers
// present, rounded up to a multiple of the shard count, since each shard
// keeps its own share of the worker's LRU. A capacity ≤ 0 means the
// default. Since a shard takes groups of 64 blocks, a worker may lose a
// block before it holds its full bound, when its groups fall unevenly over
// the shards.
func (ix *Index) bound(capacity int) int { return ix.shardBound(capacity) * len(ix.shards) }

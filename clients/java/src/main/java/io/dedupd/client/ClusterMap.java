// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import dedup.v1.ClusterMapResponse;
import dedup.v1.ReplicaInfo;
import dedup.v1.ShardInfo;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * One reading of the fleet's map (rpc ClusterMap in proto/dedup.proto):
 * which shard owns a user and the replicas of each shard. Immutable; any
 * thread. A map with partition count 0 or an unknown partitioner routes
 * nothing ({@link #ownerShard} is -1): calls then go to any node without
 * the map hash, and that node forwards them.
 */
public final class ClusterMap {
    /** A replica of a shard as the answering node last saw it. */
    public static final class Replica {
        private final int shard;
        private final int replica;
        private final String address;
        private final boolean ready;
        private final long lagMs;

        Replica(int shard, int replica, String address, boolean ready, long lagMs) {
            this.shard = shard;
            this.replica = replica;
            this.address = address;
            this.ready = ready;
            this.lagMs = lagMs;
        }

        public int shard() {
            return shard;
        }

        public int replica() {
            return replica;
        }

        /** host:port of its gRPC listener. */
        public String address() {
            return address;
        }

        public boolean ready() {
            return ready;
        }

        /** Ingest lag by offsets; -1 when not known. */
        public long lagMs() {
            return lagMs;
        }

        @Override
        public String toString() {
            return shard + "." + replica + "@" + address + (ready ? "" : " (not ready)")
                + (lagMs >= 0 ? " lag " + lagMs + " ms" : "");
        }
    }

    private final String hash;
    private final String partitionerName;
    private final Partitioner partitioner;
    private final int partitionCount;
    private final List<List<Replica>> shards;
    private final long maxLagMs;

    private ClusterMap(String hash, String partitionerName, int partitionCount,
                       List<List<Replica>> shards, long maxLagMs) {
        this.hash = hash;
        this.partitionerName = partitionerName;
        this.partitioner = Partitioner.parse(partitionerName);
        this.partitionCount = partitionCount;
        this.shards = shards;
        this.maxLagMs = maxLagMs;
    }

    /** The map a ClusterMap reply describes. Shards are taken in the order given (shards[s].shard == s). */
    public static ClusterMap from(ClusterMapResponse r) {
        List<List<Replica>> shards = new ArrayList<>();
        for (int s = 0; s < r.getShardsCount(); s++) {
            ShardInfo si = r.getShards(s);
            List<Replica> reps = new ArrayList<>();
            for (ReplicaInfo ri : si.getReplicasList()) {
                if (!ri.getAddress().isEmpty()) {
                    reps.add(new Replica(s, ri.getReplica(), ri.getAddress(), ri.getReady(), ri.getLagMs()));
                }
            }
            shards.add(Collections.unmodifiableList(reps));
        }
        return new ClusterMap(r.getMapHash(), r.getPartitioner(),
            (int) Math.min(Integer.MAX_VALUE, r.getPartitionCount() & 0xffffffffL),
            Collections.unmodifiableList(shards), r.getMaxLagMs() & 0xffffffffL);
    }

    /** The map hash (16 hex digits) the client sends in `dedupd-map-hash`. */
    public String hash() {
        return hash;
    }

    public String partitionerName() {
        return partitionerName;
    }

    public int partitionCount() {
        return partitionCount;
    }

    public int shardCount() {
        return shards.size();
    }

    /** The replicas of shard S, in the map's order. */
    public List<Replica> replicas(int s) {
        return shards.get(s);
    }

    /** cluster.max_lag_ms: a replica further behind is "behind" (0: not judged). */
    public long maxLagMs() {
        return maxLagMs;
    }

    /** Whether this map can route a user at all (partitioner known, partition count and shards > 0). */
    public boolean routable() {
        return partitioner != null && partitionCount > 0 && !shards.isEmpty() && !hash.isEmpty();
    }

    /** The partition of USER as the producers choose it; -1 when not routable. */
    public int partitionOf(String user) {
        return routable() ? partitioner.partitionOf(user, partitionCount) : -1;
    }

    /** The shard that owns USER (partition mod shards); -1 when not routable. */
    public int ownerShard(String user) {
        int p = partitionOf(user);
        return p < 0 ? -1 : p % shards.size();
    }

    /** A replica the map says is ready and not behind. */
    public boolean healthy(Replica r) {
        return r.ready && (maxLagMs <= 0 || r.lagMs < 0 || r.lagMs <= maxLagMs);
    }

    /** Every replica's address, shard by shard. */
    public List<String> addresses() {
        List<String> out = new ArrayList<>();
        for (List<Replica> reps : shards) {
            for (Replica r : reps) {
                out.add(r.address);
            }
        }
        return out;
    }

    @Override
    public String toString() {
        return "map " + hash + " " + partitionerName + "/" + partitionCount + " " + shards;
    }
}

"""The queue engine on Cassandra: ids, buckets, pointers, reservations, delivery, repair."""

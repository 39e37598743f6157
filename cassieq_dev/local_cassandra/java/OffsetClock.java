package cassieq.dev;

import org.apache.cassandra.utils.Clock;

/**
 * A Cassandra node's wall clock moved by a fixed offset, for tests of clock skew between nodes.
 *
 * <p>Installed with {@code -Dcassandra.clock=cassieq.dev.OffsetClock}: Cassandra's
 * {@code Clock.Global} builds it once, at class initialisation, through this no-argument
 * constructor. The offset is {@code -Dcassieq.clock_offset_ms=<milliseconds>} (negative: behind;
 * absent: 0), read once. Only the wall clock moves: {@code nanoTime} is the system's, so
 * timeouts and intervals measured on this node keep their length.
 */
public final class OffsetClock implements Clock {
    public static final String OFFSET_PROPERTY = "cassieq.clock_offset_ms";

    private final long offsetMillis;

    public OffsetClock() {
        String value = System.getProperty(OFFSET_PROPERTY, "0").trim();
        // A value that does not parse throws: Cassandra then logs the error at startup and
        // falls back to the system clock, so the launcher checks the value before it starts
        // the node.
        this.offsetMillis = Long.parseLong(value);
    }

    @Override
    public long nanoTime() {
        return System.nanoTime();
    }

    @Override
    public long currentTimeMillis() {
        return System.currentTimeMillis() + offsetMillis;
    }

    public long offsetMillis() {
        return offsetMillis;
    }
}

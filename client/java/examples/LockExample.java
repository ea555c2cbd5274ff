import io.chubby.cell.Cell;
import io.chubby.cell.ChubbyException;
import io.chubby.cell.Lock;
import io.chubby.cell.Session;
import io.chubby.cell.SessionEvent;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;

/**
 * Holds a lock of a Chubby cell while it runs and prints its sequencer.
 *
 * <pre>
 * java -cp "$(cat client/java/build/classpath):client/java/build/test-classes" \
 *     LockExample 127.0.0.1:7000 /example/leader 30
 * </pre>
 *
 * Arguments: the cell's replica addresses (comma-separated), the lock
 * file's path (its missing parent directories are made), and how many
 * seconds to hold the lock (default 30). It waits
 * for the lock as long as the cell allows (10 minutes), then holds it,
 * saying when the session is in jeopardy (stop acting on the lock) and safe
 * again, and releases it when the time is up.
 */
public final class LockExample {
    private LockExample() {}

    /**
     * Runs the example.
     *
     * @param args addresses, path, seconds
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        if (args.length < 2 || args.length > 3) {
            System.err.println("usage: LockExample host:port[,host:port...] /lock/path [seconds]");
            System.exit(2);
        }
        List<String> addrs = Arrays.asList(args[0].split(","));
        String path = args[1];
        long seconds = 30;
        if (args.length == 3) {
            try {
                seconds = Long.parseLong(args[2]);
            } catch (NumberFormatException e) {
                seconds = -1;
            }
            if (seconds < 0 || seconds > 86400) {
                System.err.println("seconds: want a number in 0..86400, got " + args[2]);
                System.exit(2);
            }
        }
        try (Cell cell = Cell.connect(addrs);
                Session s = cell.newSession()) {
            s.addListener((session, ev) -> {
                if (ev.kind() == SessionEvent.Kind.JEOPARDY) {
                    System.out.println("session in jeopardy: stop acting on the lock");
                } else if (ev.kind() == SessionEvent.Kind.SAFE) {
                    System.out.println("session safe again");
                } else if (ev.kind() == SessionEvent.Kind.EXPIRED) {
                    System.out.println("session expired: the lock is lost");
                }
            });
            int slash = path.lastIndexOf('/');
            if (slash > 0) {
                s.mkdir(path.substring(0, slash), true); // a fresh cell has only "/"
            }
            System.out.println("waiting for " + path + " (master " + cell.currentMaster() + ")");
            try (Lock l = s.lock(path)) {
                System.out.println("holding " + path + " with sequencer " + l.sequencer().format());
                Thread.sleep(Duration.ofSeconds(seconds).toMillis());
                System.out.println("releasing " + path + " (still held: " + l.check().valid() + ")");
            }
        } catch (ChubbyException e) {
            System.err.println(e.getMessage());
            System.exit(1);
        }
    }
}

import io.chubby.cell.Cell;
import io.chubby.cell.Cmp;
import io.chubby.cell.Contents;
import io.chubby.cell.Handle;
import io.chubby.cell.Lock;
import io.chubby.cell.MultiResult;
import io.chubby.cell.Op;
import io.chubby.cell.Session;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

/**
 * The README's Java quick start, as a program: on a fresh cell (or any
 * other) it makes /svc, takes /svc/leader's lock, takes a timestamp,
 * creates /svc/config in a Multi if missing and reads it back under a
 * deadline.
 *
 * <pre>
 * java -cp "$(cat client/java/build/classpath):client/java/build/test-classes" QuickStart 127.0.0.1:7000
 * </pre>
 */
public final class QuickStart {
    private QuickStart() {}

    /**
     * Runs the quick start.
     *
     * @param args the cell's replica addresses (comma-separated; default 127.0.0.1:7000)
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        List<String> addrs = List.of((args.length > 0 ? args[0] : "127.0.0.1:7000").split(","));
        // README: begin
        try (Cell cell = Cell.connect(addrs);                   // CHUBBY_TLS_* set: mutual TLS
                Session s = cell.newSession()) {
            s.mkdir("/svc", true);                              // a fresh cell has only "/"
            try (Lock l = s.lock("/svc/leader")) {
                System.out.println("leading with " + l.sequencer().format()); // receivers: checkSequencer
            }
            System.out.println("timestamp " + cell.timestamp()); // the oracle: strictly increasing
            MultiResult r = s.multi(List.of(Cmp.notExists("/svc/config")),
                    List.of(Op.create("/svc/config", "v1".getBytes(StandardCharsets.UTF_8))));
            System.out.println("created /svc/config: " + r.succeeded());
            Contents c = cell.withDeadline(Duration.ofSeconds(2), () -> {
                try (Handle h = s.open("/svc/config")) {
                    return h.read();
                }
            });
            System.out.println("/svc/config: " + c.text() + " (generation " + c.stat().contentGeneration() + ")");
        }
        // README: end
    }
}

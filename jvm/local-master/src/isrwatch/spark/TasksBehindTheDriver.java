package isrwatch.spark;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Map;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * With a local master, Spark's tasks run at a lower CPU priority than the rest of the process.
 *
 * <p>A local master's executor is the driver's own JVM: a validate micro-batch's tasks take both cores while the alert
 * lane, whose batches are planned and evaluated on the driver and run no task, waits for one. Measured in
 * bench/alert_latency.py, a lane batch overlapping a validate batch took 1.7 times as long as one alone. Tasks are
 * throughput work, the lane is latency work: each task thread lowers its own priority (nice 10) once, the first time
 * it runs a task, so the scheduler gives the lane's threads the core first. Threads and processes a task thread starts
 * (the state store's maintenance, Python workers) inherit it.
 *
 * <p>Linux only: a thread's priority is set through {@code /proc/thread-self} and util-linux's {@code renice}
 * (Java has no call for it); where either is missing, tasks keep the process's priority.
 */
public class TasksBehindTheDriver implements SparkPlugin {
    static final String NICE = "10";

    @Override
    public DriverPlugin driverPlugin() {
        return null;
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new Lowering();
    }

    /** Lowers each task thread's priority the first time it runs a task (task threads are pooled and reused). */
    static final class Lowering implements ExecutorPlugin {
        private final ThreadLocal<Boolean> lowered = ThreadLocal.withInitial(() -> Boolean.FALSE);

        @Override
        public void init(PluginContext context, Map<String, String> extraConf) {
        }

        @Override
        public void onTaskStart() {
            if (lowered.get()) {
                return;
            }
            lowered.set(Boolean.TRUE);
            try {
                // "<pid>/task/<tid>": the calling thread's id in the kernel, which `renice -p` takes
                String self = Files.readSymbolicLink(Paths.get("/proc/thread-self")).toString();
                String tid = self.substring(self.lastIndexOf('/') + 1);
                Process renice = new ProcessBuilder("renice", "-n", NICE, "-p", tid)
                        .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
                renice.waitFor();
            } catch (IOException | UnsupportedOperationException e) {
                // not Linux, or no renice: the task runs at the process's priority
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}

package isrwatch.spark;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collections;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * With a local master, the throughput work of the driver's JVM (Spark's tasks, the JIT compiler, validate's stream
 * execution thread) runs at a lower CPU priority than its latency work (the alert lane's query).
 *
 * <p>A local master's executor is the driver's own JVM: a validate micro-batch's tasks take both cores while the alert
 * lane, whose batches are planned and evaluated on the driver and run no task, waits for one. Measured in
 * bench/alert_latency.py, a lane batch overlapping a validate batch took 1.7 times as long as one alone. Tasks are
 * throughput work, the lane is latency work: each task thread lowers its own priority (nice 10) once, the first time
 * it runs a task, so the scheduler gives the lane's threads the core first. Threads and processes a task thread starts
 * (the state store's maintenance, Python workers) inherit it.
 *
 * <p>So does validate's stream execution thread, from its first micro-batch on ({@link #lowerCallingThread}, called by
 * jobs/validate.py's foreachBatch body): it plans each batch (the Delta log's latest offset, the files to read) and
 * runs the driver's part of it while the alert lane's stream execution thread, in the same JVM, waits for a core.
 *
 * <p>The JIT compiler's threads go behind too, when the driver starts (foundation/spark.py makes the JVM create them all
 * at its start): in the latency bench, minutes after a start, they still took 0.4 of the 2 cores, at the lane's
 * priority. Compiling is throughput work as well; it goes on whenever a core is free.
 *
 * <p>Linux only: a thread's priority is set through {@code /proc/thread-self} and util-linux's {@code renice}
 * (Java has no call for it); where either is missing, tasks keep the process's priority.
 */
public class ThroughputWorkAtLowPriority implements SparkPlugin {
    static final String NICE = "10";

    /** Names of the JIT compiler's threads, as /proc shows them (15 characters at most). */
    static final String[] COMPILER_THREADS = {"C1 CompilerThre", "C2 CompilerThre"};

    @Override
    public DriverPlugin driverPlugin() {
        return new DriverPlugin() {
            @Override
            public Map<String, String> init(SparkContext sc, PluginContext context) {
                lowerCompilerThreads();
                return Collections.emptyMap();
            }
        };
    }

    static void lowerCompilerThreads() {
        try (DirectoryStream<Path> tasks = Files.newDirectoryStream(Paths.get("/proc/self/task"))) {
            for (Path task : tasks) {
                String name;
                try {
                    name = Files.readString(task.resolve("comm")).strip();
                } catch (IOException e) {
                    continue;  // the thread ended meanwhile
                }
                for (String compiler : COMPILER_THREADS) {
                    if (name.startsWith(compiler)) {
                        renice(task.getFileName().toString());
                    }
                }
            }
        } catch (IOException | UnsupportedOperationException e) {
            // not Linux: the compiler keeps the process's priority
        }
    }

    private static final ThreadLocal<Boolean> LOWERED = ThreadLocal.withInitial(() -> Boolean.FALSE);

    /**
     * The calling thread, and the threads it starts from now on, to nice NICE; once per thread (a Spark task thread,
     * a query's stream execution thread: both are reused).
     */
    public static void lowerCallingThread() {
        if (LOWERED.get()) {
            return;
        }
        LOWERED.set(Boolean.TRUE);
        try {
            // "<pid>/task/<tid>": the calling thread's id in the kernel, which `renice -p` takes
            String self = Files.readSymbolicLink(Paths.get("/proc/thread-self")).toString();
            renice(self.substring(self.lastIndexOf('/') + 1));
        } catch (IOException | UnsupportedOperationException e) {
            // not Linux: the thread keeps the process's priority
        }
    }

    /** Thread `tid` (its id in the kernel) to nice NICE; left as it is where util-linux's renice is missing. */
    static void renice(String tid) {
        try {
            Process renice = new ProcessBuilder("renice", "-n", NICE, "-p", tid)
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            renice.waitFor();
        } catch (IOException e) {
            // no renice
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new ExecutorPlugin() {
            @Override
            public void onTaskStart() {
                lowerCallingThread();
            }
        };
    }
}

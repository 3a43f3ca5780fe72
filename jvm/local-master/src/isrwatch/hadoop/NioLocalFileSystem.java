package isrwatch.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's checksummed local file system ({@code file:}), setting permissions through java.nio.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem} forks {@code chmod} for every file and directory it
 * creates with a permission, which is every file: a streaming micro-batch's offset and commit log entries (and their
 * {@code .crc} files) cost four forks of the driver's JVM, a few milliseconds each on an idle machine and tens with
 * busy cores. java.nio sets the same bits with one system call. A permission java.nio cannot express (the sticky
 * bit) goes Hadoop's way.
 */
public class NioLocalFileSystem extends LocalFileSystem {
    public NioLocalFileSystem() {
        super(new Raw());
    }

    /** The raw file system underneath: Hadoop's, but for how it sets a permission. */
    public static class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {
                super.setPermission(p, permission);
                return;
            }
            Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
        }
    }

    static Set<PosixFilePermission> posix(FsPermission permission) {
        Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
        add(out, permission.getUserAction(), PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE,
            PosixFilePermission.OWNER_EXECUTE);
        add(out, permission.getGroupAction(), PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE,
            PosixFilePermission.GROUP_EXECUTE);
        add(out, permission.getOtherAction(), PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
            PosixFilePermission.OTHERS_EXECUTE);
        return out;
    }

    private static void add(Set<PosixFilePermission> out, FsAction action, PosixFilePermission read,
                            PosixFilePermission write, PosixFilePermission execute) {
        if (action.implies(FsAction.READ)) {
            out.add(read);
        }
        if (action.implies(FsAction.WRITE)) {
            out.add(write);
        }
        if (action.implies(FsAction.EXECUTE)) {
            out.add(execute);
        }
    }
}

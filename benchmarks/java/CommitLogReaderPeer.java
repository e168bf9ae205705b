// The commit-log peer of benchmarks/peers.py: Cassandra's own CommitLogReader (what Debezium's
// Cassandra connector reads cdc_raw with) over the same segments cdcflow parses, decoding every value.
//
//   java -cp <cassandra-all and its dependencies>:<classes> CommitLogReaderPeer \
//       CONFIG_YAML KEYSPACE TABLE_ID "CREATE TABLE ..." "CREATE TYPE ...;..." WARMUPS ROUNDS SEGMENT...
//
// The table is built from its CQL (its user types from theirs, ';'-separated, empty for none) with
// the live table's id and added to Schema.instance (nothing is read from disk), so the reader
// decodes exactly the mutations cdcflow decodes. Prints one line
// per round: "round <n> bytes <b> seconds <s> mutations <m> rows <r> cells <c> checksum <x> cpu <s>".

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;

import org.apache.cassandra.config.DatabaseDescriptor;
import org.apache.cassandra.cql3.CQLFragmentParser;
import org.apache.cassandra.cql3.CqlParser;
import org.apache.cassandra.cql3.statements.schema.CreateTableStatement;
import org.apache.cassandra.db.Mutation;
import org.apache.cassandra.db.commitlog.CommitLogDescriptor;
import org.apache.cassandra.db.commitlog.CommitLogReadHandler;
import org.apache.cassandra.db.commitlog.CommitLogReader;
import org.apache.cassandra.db.marshal.AbstractType;
import org.apache.cassandra.db.marshal.ByteBufferAccessor;
import org.apache.cassandra.db.marshal.CollectionType;
import org.apache.cassandra.db.marshal.TupleType;
import org.apache.cassandra.db.marshal.UserType;
import org.apache.cassandra.db.partitions.PartitionUpdate;
import org.apache.cassandra.db.rows.Cell;
import org.apache.cassandra.db.rows.ColumnData;
import org.apache.cassandra.db.rows.ComplexColumnData;
import org.apache.cassandra.db.rows.Row;
import org.apache.cassandra.db.rows.Unfiltered;
import org.apache.cassandra.io.util.File;
import org.apache.cassandra.schema.ColumnMetadata;
import org.apache.cassandra.schema.KeyspaceMetadata;
import org.apache.cassandra.schema.KeyspaceParams;
import org.apache.cassandra.schema.Schema;
import org.apache.cassandra.schema.TableId;
import org.apache.cassandra.schema.TableMetadata;
import org.apache.cassandra.schema.Tables;
import org.apache.cassandra.schema.Types;
import org.apache.cassandra.schema.UserFunctions;
import org.apache.cassandra.schema.Views;

public final class CommitLogReaderPeer {
    /** Touches every value: the key, each clustering value and each cell, composed to a Java object. */
    static final class TouchEveryValue implements CommitLogReadHandler {
        long mutations;
        long rows;
        long cells;
        long checksum; // keeps the JIT from dropping the decoded values

        @Override
        public boolean shouldSkipSegmentOnError(CommitLogReadException exception) {
            return false;
        }

        @Override
        public void handleUnrecoverableError(CommitLogReadException exception) {
            throw new RuntimeException(exception);
        }

        @Override
        public void handleMutation(Mutation mutation, int size, int entryLocation, CommitLogDescriptor descriptor) {
            mutations++;
            for (PartitionUpdate update : mutation.getPartitionUpdates()) {
                TableMetadata table = update.metadata();
                checksum += compose(table.partitionKeyType, update.partitionKey().getKey());
                if (!update.staticRow().isEmpty()) {
                    touch(update.staticRow(), table);
                }
                for (Unfiltered unfiltered : update) {
                    if (unfiltered.isRow()) {
                        touch((Row) unfiltered, table);
                    }
                }
            }
        }

        private void touch(Row row, TableMetadata table) {
            rows++;
            for (int i = 0; i < row.clustering().size(); i++) {
                ByteBuffer value = row.clustering().bufferAt(i);
                if (value != null) {
                    checksum += compose(table.clusteringColumns().get(i).type, value);
                }
            }
            for (ColumnData data : row) {
                ColumnMetadata column = data.column();
                if (column.isSimple()) {
                    touch((Cell<?>) data, column);
                } else {
                    for (Cell<?> cell : (ComplexColumnData) data) {
                        touch(cell, column);
                    }
                }
            }
        }

        private void touch(Cell<?> cell, ColumnMetadata column) {
            cells++;
            checksum += cell.timestamp();
            if (cell.isTombstone()) {
                return;
            }
            ByteBuffer value = cell.buffer();
            if (column.isComplex()) {
                // An element of a non-frozen collection: its key in the cell path, its value in the cell.
                if (column.type instanceof CollectionType<?> collection) {
                    checksum += collection.nameComparator().compose(cell.path().get(0)).hashCode();
                    if (value.hasRemaining()) {
                        checksum += compose(collection.valueComparator(), value);
                    }
                } else if (column.type instanceof UserType user) {
                    // A field of a non-frozen user type: its position in the cell path.
                    int field = user.nameComparator().compose(cell.path().get(0));
                    if (value.hasRemaining()) {
                        checksum += compose(user.fieldType(field), value);
                    }
                }
                return;
            }
            if (value.hasRemaining()) {
                checksum += compose(column.type, value);
            }
        }

        /** The value composed to its Java object; a tuple's or user type's fields each (a
         * TupleType composes to its raw bytes), as cdcflow decodes them. */
        private static int compose(AbstractType<?> type, ByteBuffer value) {
            if (type instanceof TupleType tuple) {
                int hash = 0;
                ByteBuffer[] fields = tuple.split(ByteBufferAccessor.instance, value);
                for (int i = 0; i < fields.length; i++) {
                    if (fields[i] != null && fields[i].hasRemaining()) {
                        hash += compose(tuple.type(i), fields[i]);
                    }
                }
                return hash;
            }
            return type.compose(value).hashCode();
        }
    }

    /** The user types of "CREATE TYPE [ks.]name (field type, ...)" statements, ';'-separated. */
    static Types userTypes(String keyspace, String statements) {
        Types.RawBuilder builder = Types.rawBuilder(keyspace);
        for (String statement : statements.split(";")) {
            if (statement.isBlank()) {
                continue;
            }
            int open = statement.indexOf('(');
            String[] head = statement.substring(0, open).trim().split("\\s+");
            String name = head[head.length - 1];
            name = name.substring(name.lastIndexOf('.') + 1);
            List<String> fieldNames = new ArrayList<>();
            List<String> fieldTypes = new ArrayList<>();
            String body = statement.substring(open + 1, statement.lastIndexOf(')'));
            int depth = 0;
            int start = 0;
            for (int i = 0; i <= body.length(); i++) {
                char c = i < body.length() ? body.charAt(i) : ',';
                if (c == '<') depth++;
                if (c == '>') depth--;
                if (c == ',' && depth == 0) {
                    String field = body.substring(start, i).trim();
                    int space = field.indexOf(' ');
                    fieldNames.add(field.substring(0, space));
                    fieldTypes.add(field.substring(space + 1).trim());
                    start = i + 1;
                }
            }
            builder.add(name, fieldNames, fieldTypes);
        }
        return builder.build();
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("cassandra.config", "file://" + args[0]);
        String keyspace = args[1];
        UUID tableId = UUID.fromString(args[2]);
        String cql = args[3];
        String typeStatements = args[4];
        int warmups = Integer.parseInt(args[5]);
        int rounds = Integer.parseInt(args[6]);
        List<File> segments = new ArrayList<>();
        long bytes = 0;
        for (int i = 7; i < args.length; i++) {
            File file = new File(args[i]);
            segments.add(file);
            bytes += file.length();
        }

        DatabaseDescriptor.toolInitialization();
        Types types = userTypes(keyspace, typeStatements);
        // CreateTableStatement.parse, with the keyspace's user types instead of none.
        TableMetadata table = CQLFragmentParser.parseAny(CqlParser::createTableStatement, cql, "CREATE TABLE")
                .keyspace(keyspace)
                .prepare(null)
                .builder(types)
                .id(TableId.fromUUID(tableId))
                .build();
        KeyspaceMetadata metadata = KeyspaceMetadata.create(keyspace, KeyspaceParams.simple(1), Tables.of(table),
                Views.none(), types, UserFunctions.none());
        Schema.instance.transform(current -> current.withAddedOrUpdated(metadata));

        File[] files = segments.toArray(new File[0]);
        // CPU time of the whole process (JIT and GC threads included), beside wall-clock time.
        var os = (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        for (int round = -warmups; round < rounds; round++) {
            TouchEveryValue handler = new TouchEveryValue();
            CommitLogReader reader = new CommitLogReader();
            long cpuStarted = os.getProcessCpuTime();
            long started = System.nanoTime();
            reader.readAllFiles(handler, files);
            double seconds = (System.nanoTime() - started) / 1e9;
            double cpuSeconds = (os.getProcessCpuTime() - cpuStarted) / 1e9;
            if (round >= 0) {
                System.out.printf(
                    "round %d bytes %d seconds %.6f mutations %d rows %d cells %d checksum %d cpu %.6f%n",
                    round, bytes, seconds, handler.mutations, handler.rows, handler.cells, handler.checksum,
                    cpuSeconds);
            }
        }
        System.exit(0);
    }
}

import java.sql.*;
import java.util.Properties;

/** Drives pgjdbc against the dpsql server: metadata listing and a PreparedStatement aggregate. */
public class JdbcProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("connectTimeout", "10");
        props.setProperty("socketTimeout", "30");
        props.setProperty("prepareThreshold", "2");
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData md = conn.getMetaData();
            try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) System.out.println("TABLE " + rs.getString("TABLE_NAME"));
            }
            try (ResultSet rs = md.getColumns(null, "public", "adult", "%")) {
                while (rs.next()) System.out.println("COLUMN " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME"));
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT sex, COUNT(*) AS n FROM adult WHERE age >= ? GROUP BY sex ORDER BY sex")) {
                for (int i = 0; i < 4; i++) {
                    ps.setInt(1, 30);
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) System.out.println("ROW " + i + " " + rs.getString(1) + " " + rs.getDouble(2));
                    }
                }
            }
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT * FROM adult");
                System.out.println("REFUSAL missing");
            } catch (SQLException e) {
                System.out.println("REFUSED " + e.getSQLState());
            }
        }
    }
}

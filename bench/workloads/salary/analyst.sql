-- salary: 28 queries an analyst might ask of the Maryland salary table (integer codes, see
-- domain.toml), written by hand for bench/reported_errors.py: counts by pay rate, system and
-- organisation, salary bands, prefix counts of the salary code, SUM/AVG of the earnings codes
-- and quantiles of the salary and gross codes; an OR, an IN, a NOT over two columns and a
-- HAVING at the end.
SELECT COUNT(*) FROM salary;
SELECT "pay-rate", COUNT(*) FROM salary GROUP BY "pay-rate";
SELECT system, COUNT(*) FROM salary GROUP BY system;
SELECT system, "pay-rate", COUNT(*) FROM salary GROUP BY system, "pay-rate";
SELECT "organization-name", COUNT(*) FROM salary GROUP BY "organization-name";
SELECT "organization-name", COUNT(*) FROM salary WHERE "overtime-earning" > 0 GROUP BY "organization-name";
SELECT "annual-salary", COUNT(*) FROM salary GROUP BY "annual-salary";
SELECT "annual-salary", COUNT(*) FROM salary WHERE "pay-rate" = 2 GROUP BY "annual-salary";
SELECT COUNT(*) FROM salary WHERE "annual-salary" >= 10;
SELECT COUNT(*) FROM salary WHERE "annual-salary" BETWEEN 3 AND 6 AND system = 1;
SELECT COUNT(*) FROM salary WHERE "annual-salary" <= 2;
SELECT COUNT(*) FROM salary WHERE "annual-salary" <= 4;
SELECT COUNT(*) FROM salary WHERE "annual-salary" <= 8;
SELECT "first-name", COUNT(*) FROM salary GROUP BY "first-name";
SELECT "ytd-gross", COUNT(*) FROM salary GROUP BY "ytd-gross";
SELECT system, COUNT(*) FROM salary WHERE "other-earnings" > 0 GROUP BY system;
SELECT SUM("ytd-gross") FROM salary;
SELECT system, AVG("annual-salary") FROM salary GROUP BY system;
SELECT "pay-rate", AVG("overtime-earning") FROM salary GROUP BY "pay-rate";
SELECT "organization-name", SUM("overtime-earning") FROM salary GROUP BY "organization-name";
SELECT AVG("regular-earnings") FROM salary WHERE system = 0;
SELECT MEDIAN("annual-salary") FROM salary;
SELECT system, percentile_disc(0.9) WITHIN GROUP (ORDER BY "ytd-gross") FROM salary GROUP BY system;
SELECT "pay-rate", SUM("other-earnings") FROM salary GROUP BY "pay-rate";
SELECT system, COUNT(*) FROM salary WHERE "overtime-earning" > 0 OR "other-earnings" > 0 GROUP BY system;
SELECT COUNT(*) FROM salary WHERE "organization-name" IN (12, 26, 27, 73);
SELECT "pay-rate", COUNT(*) FROM salary WHERE NOT ("annual-salary" <= 4 AND system = 1) GROUP BY "pay-rate";
SELECT system, COUNT(*) FROM salary GROUP BY system HAVING COUNT(*) > 1000;

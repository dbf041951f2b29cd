-- taxi: 28 queries an analyst might ask of the NIST challenge's Chicago taxi trips (integer
-- codes, see domain.toml), written by hand for bench/reported_errors.py: trips by shift,
-- company, community area and payment type, shift ranges, SUM/AVG of the fare, tip, total,
-- duration and distance codes, and quantiles of the fare and distance codes; an OR, an IN, a
-- HAVING and a filtered AVG at the end.
SELECT COUNT(*) FROM taxi;
SELECT shift, COUNT(*) FROM taxi GROUP BY shift;
SELECT payment_type, COUNT(*) FROM taxi GROUP BY payment_type;
SELECT company_id, COUNT(*) FROM taxi GROUP BY company_id;
SELECT pickup_community_area, COUNT(*) FROM taxi GROUP BY pickup_community_area;
SELECT dropoff_community_area, COUNT(*) FROM taxi WHERE pickup_community_area = 8 GROUP BY dropoff_community_area;
SELECT payment_type, COUNT(*) FROM taxi WHERE tips = 0 GROUP BY payment_type;
SELECT shift, payment_type, COUNT(*) FROM taxi GROUP BY shift, payment_type;
SELECT fare, COUNT(*) FROM taxi GROUP BY fare;
SELECT trip_miles, COUNT(*) FROM taxi GROUP BY trip_miles;
SELECT fare, tips, COUNT(*) FROM taxi GROUP BY fare, tips;
SELECT COUNT(*) FROM taxi WHERE trip_seconds >= 5;
SELECT COUNT(*) FROM taxi WHERE shift BETWEEN 0 AND 6;
SELECT COUNT(*) FROM taxi WHERE shift BETWEEN 7 AND 13 AND payment_type = 1;
SELECT pickup_community_area, COUNT(*) FROM taxi WHERE trip_miles >= 6 GROUP BY pickup_community_area;
SELECT SUM(trip_total) FROM taxi;
SELECT payment_type, AVG(tips) FROM taxi GROUP BY payment_type;
SELECT shift, AVG(fare) FROM taxi GROUP BY shift;
SELECT shift, SUM(trip_seconds) FROM taxi GROUP BY shift;
SELECT AVG(trip_miles) FROM taxi WHERE payment_type = 1;
SELECT company_id, SUM(trip_total) FROM taxi GROUP BY company_id;
SELECT MEDIAN(fare) FROM taxi;
SELECT payment_type, percentile_disc(0.9) WITHIN GROUP (ORDER BY trip_miles) FROM taxi GROUP BY payment_type;
SELECT shift, MEDIAN(trip_seconds) FROM taxi GROUP BY shift;
SELECT COUNT(*) FROM taxi WHERE payment_type = 1 OR tips > 0;
SELECT shift, COUNT(*) FROM taxi WHERE pickup_community_area IN (8, 32, 76) GROUP BY shift;
SELECT payment_type, COUNT(*) FROM taxi GROUP BY payment_type HAVING COUNT(*) > 1000;
SELECT trip_miles, AVG(fare) FROM taxi WHERE trip_seconds BETWEEN 2 AND 8 GROUP BY trip_miles;

-- titanic: the 12-query dashboard (dashboard.sql) plus 6 SUM / AVG / quantile queries, the
-- mixed workload of issue 16.  Written by hand (not by generate.py).
SELECT COUNT(*) FROM titanic;
SELECT survived, COUNT(*) FROM titanic GROUP BY survived;
SELECT pclass, COUNT(*) FROM titanic GROUP BY pclass;
SELECT sex, COUNT(*) FROM titanic GROUP BY sex;
SELECT pclass, survived, COUNT(*) FROM titanic GROUP BY pclass, survived;
SELECT sex, survived, COUNT(*) FROM titanic GROUP BY sex, survived;
SELECT embarked, survived, COUNT(*) FROM titanic GROUP BY embarked, survived;
SELECT age, COUNT(*) FROM titanic GROUP BY age;
SELECT survived, COUNT(*) FROM titanic WHERE age < 16 GROUP BY survived;
SELECT survived, COUNT(*) FROM titanic WHERE age >= 60 GROUP BY survived;
SELECT COUNT(*) FROM titanic WHERE sibsp > 0 OR parch > 0;
SELECT fare, COUNT(*) FROM titanic GROUP BY fare;
-- value aggregates (age and fare are the published integer codes)
SELECT survived, AVG(age) FROM titanic GROUP BY survived;
SELECT pclass, AVG(fare) FROM titanic GROUP BY pclass;
SELECT SUM(fare) FROM titanic;
SELECT sex, SUM(sibsp) FROM titanic GROUP BY sex;
SELECT pclass, MEDIAN(age) FROM titanic GROUP BY pclass;
SELECT survived, percentile_disc(0.75) WITHIN GROUP (ORDER BY fare) FROM titanic GROUP BY survived;

-- adult: the 30-query dashboard (examples/adult/dashboard.sql) plus 8 SUM / AVG / quantile
-- queries, the mixed workload of issue 16: one plan for counts and value aggregates.
-- Written by hand (not by generate.py); bench/planner.py and bench/suite.py read it.
SELECT COUNT(*) FROM adult;
SELECT sex, COUNT(*) FROM adult GROUP BY sex;
SELECT race, COUNT(*) FROM adult GROUP BY race;
SELECT income, COUNT(*) FROM adult GROUP BY income;
SELECT marital_status, COUNT(*) FROM adult GROUP BY marital_status;
SELECT relationship, COUNT(*) FROM adult GROUP BY relationship;
SELECT workclass, COUNT(*) FROM adult GROUP BY workclass;
SELECT education, COUNT(*) FROM adult GROUP BY education;
SELECT occupation, COUNT(*) FROM adult GROUP BY occupation;
SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income;
SELECT race, income, COUNT(*) FROM adult GROUP BY race, income;
SELECT education, income, COUNT(*) FROM adult GROUP BY education, income;
SELECT occupation, income, COUNT(*) FROM adult GROUP BY occupation, income;
SELECT marital_status, income, COUNT(*) FROM adult GROUP BY marital_status, income;
SELECT workclass, income, COUNT(*) FROM adult GROUP BY workclass, income;
SELECT age, COUNT(*) FROM adult GROUP BY age;
SELECT COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40;
SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 GROUP BY sex;
SELECT income, COUNT(*) FROM adult WHERE age < 25 GROUP BY income;
SELECT income, COUNT(*) FROM adult WHERE age >= 60 GROUP BY income;
SELECT age, income, COUNT(*) FROM adult GROUP BY age, income;
SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week;
SELECT COUNT(*) FROM adult WHERE hours_per_week > 40;
SELECT sex, COUNT(*) FROM adult WHERE hours_per_week >= 50 GROUP BY sex;
SELECT income, COUNT(*) FROM adult WHERE hours_per_week < 35 GROUP BY income;
SELECT education_num, COUNT(*) FROM adult GROUP BY education_num;
SELECT education_num, income, COUNT(*) FROM adult GROUP BY education_num, income;
SELECT COUNT(*) FROM adult WHERE capital_gain > 0;
SELECT income, COUNT(*) FROM adult WHERE capital_gain > 0 GROUP BY income;
SELECT native_country, COUNT(*) FROM adult GROUP BY native_country;
-- value aggregates
SELECT sex, AVG(hours_per_week) FROM adult GROUP BY sex;
SELECT income, AVG(age) FROM adult GROUP BY income;
SELECT education_num, AVG(hours_per_week) FROM adult GROUP BY education_num;
SELECT SUM(hours_per_week) FROM adult;
SELECT income, SUM(capital_gain) FROM adult GROUP BY income;
SELECT race, AVG(education_num) FROM adult GROUP BY race;
SELECT income, MEDIAN(age) FROM adult GROUP BY income;
SELECT sex, percentile_disc(0.9) WITHIN GROUP (ORDER BY hours_per_week) FROM adult GROUP BY sex;

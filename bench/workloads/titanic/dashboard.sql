-- A small survival dashboard over the discretized titanic table (integer codes, see
-- domain.toml): headline counts, survival by class, sex and age band.
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

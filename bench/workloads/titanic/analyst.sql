-- titanic: 22 queries an analyst might ask of the Titanic passengers under the CSV's own
-- column names (original.toml), written by hand for bench/reported_errors.py: survival counts,
-- the age CDF (Age: 91 single-year codes, the table's fine column), SUM/AVG of the age, fare
-- and family codes, and age and fare quantiles.
SELECT COUNT(*) FROM titanic;
SELECT Survived, COUNT(*) FROM titanic GROUP BY Survived;
SELECT Pclass, Survived, COUNT(*) FROM titanic GROUP BY Pclass, Survived;
SELECT Sex, Survived, COUNT(*) FROM titanic GROUP BY Sex, Survived;
SELECT Embarked, COUNT(*) FROM titanic GROUP BY Embarked;
SELECT Cabin, COUNT(*) FROM titanic WHERE Pclass = 0 GROUP BY Cabin;
SELECT Age, COUNT(*) FROM titanic GROUP BY Age;
SELECT Survived, COUNT(*) FROM titanic WHERE Age < 16 GROUP BY Survived;
SELECT COUNT(*) FROM titanic WHERE Age <= 10;
SELECT COUNT(*) FROM titanic WHERE Age <= 20;
SELECT COUNT(*) FROM titanic WHERE Age <= 30;
SELECT COUNT(*) FROM titanic WHERE Age <= 40;
SELECT COUNT(*) FROM titanic WHERE Age <= 60;
SELECT COUNT(*) FROM titanic WHERE Age BETWEEN 18 AND 35 AND Sex = 1;
SELECT COUNT(*) FROM titanic WHERE SibSp > 0 OR Parch > 0;
SELECT Survived, AVG(Age) FROM titanic WHERE Age < 90 GROUP BY Survived;
SELECT Pclass, AVG(Fare) FROM titanic GROUP BY Pclass;
SELECT SUM(Fare) FROM titanic;
SELECT Sex, SUM(SibSp) FROM titanic GROUP BY Sex;
SELECT MEDIAN(Age) FROM titanic WHERE Age < 90;
SELECT Pclass, percentile_disc(0.25) WITHIN GROUP (ORDER BY Age) FROM titanic WHERE Age < 90 GROUP BY Pclass;
SELECT Survived, MEDIAN(Fare) FROM titanic GROUP BY Survived;
